"""Re-execute notebooks in place, top to bottom, saving outputs and widget state.

Usage: python tools/execute_notebooks.py [notebooks/NN_name.ipynb ...]   (default: all)

Runs each notebook in a fresh kernel with the working directory set to notebooks/, stores the
ipywidgets state (so the web book can render widgets), and prints the wall time per notebook.
The kernels get ``LDF_STATIC_VIEWS=1``: every calculator computes its whole grid for the web
page's static view (``llm_dataflow.live``; a reader's JupyterLab kernel skips that work).  No
per-cell timing metadata is written (it would change on every run and say nothing to readers).
It saves ``metadata.llm_dataflow.outputs_sha256`` (``notebook_hygiene.outputs_digest``): the
hygiene test recomputes it, so outputs edited or pasted after execution fail.
The saved widget state keeps only the models that an output can show no other way (and the
models those refer to): a finished ``ldf.progress`` bar has closed its widgets, and a calculator's
output carries its own ``text/html`` (the web book and an untrusted JupyterLab show that).  A
chapter whose widgets are all calculators then saves no widget state at all, so (1) its web page
does not load the widget manager, and (2) JupyterLab, which with ``saveState`` on marks a notebook
modified as soon as it restores saved widget models, opens it unmodified.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from notebook_hygiene import outputs_digest  # noqa: E402


def kernel_env() -> None:
    """The environment the notebooks' kernels inherit while the book's outputs are made."""
    os.environ["LDF_STATIC_VIEWS"] = "1"
    os.environ.pop("JPY_SESSION_NAME", None)   # set when this runs from a JupyterLab kernel


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def prune_widget_state(nb) -> int:
    """Drop the saved state of widget models that no output needs: keep a model only if an output
    shows it with no ``text/html`` alternative (and every model it refers to with
    ``IPY_MODEL_<id>``); remove ``metadata.widgets`` when nothing is left.  Returns the number of
    models dropped."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    todo = [o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells for o in c.get("outputs", [])
            if WIDGET_VIEW in o.get("data", {}) and "text/html" not in o["data"]]
    keep = set()
    while todo:
        mid = todo.pop()
        if mid in keep or mid not in state:
            continue
        keep.add(mid)
        todo.extend(re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[mid])))
    dropped = len(state) - len(keep)
    for mid in set(state) - keep:
        del state[mid]
    if "widgets" in nb.metadata and not state:
        del nb.metadata["widgets"]
    return dropped


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
    prune_widget_state(nb)
    nb.metadata.setdefault("llm_dataflow", {})["outputs_sha256"] = outputs_digest(nb)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str]) -> int:
    paths = [pathlib.Path(a).resolve() for a in argv] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for p in paths:
        dt = execute(p)
        shown = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
        print(f"{shown}: executed in {dt:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
