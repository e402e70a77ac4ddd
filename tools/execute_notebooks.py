"""Re-execute notebooks in place, top to bottom, saving outputs and widget state.

Usage: python tools/execute_notebooks.py [notebooks/NN_name.ipynb ...]   (default: all)

Runs each notebook in a fresh kernel with the working directory set to notebooks/, stores the
ipywidgets state (so the web book can render widgets), and prints the wall time per notebook.
The kernels get ``LDF_STATIC_VIEWS=1``: every calculator computes its whole grid for the web
page's static view (``llm_dataflow.live``; a reader's JupyterLab kernel skips that work).  No
per-cell timing metadata is written (it would change on every run and say nothing to readers).
"""
from __future__ import annotations

import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]


def kernel_env() -> None:
    """The environment the notebooks' kernels inherit while the book's outputs are made."""
    os.environ["LDF_STATIC_VIEWS"] = "1"
    os.environ.pop("JPY_SESSION_NAME", None)   # set when this runs from a JupyterLab kernel


def execute(path: pathlib.Path, timeout: int = 600) -> float:
    kernel_env()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            record_timing=False, resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    for cell in nb.cells:   # timings of an earlier run
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str]) -> int:
    paths = [pathlib.Path(a).resolve() for a in argv] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for p in paths:
        dt = execute(p)
        print(f"{p.relative_to(ROOT)}: executed in {dt:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
