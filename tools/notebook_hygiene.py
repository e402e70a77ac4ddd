"""Check (or fix) what every chapter notebook must carry for the web book and hosted kernels.

    python tools/notebook_hygiene.py          # check: exit 1 and list problems
    python tools/notebook_hygiene.py --fix    # insert/refresh, then check

1. The first cell is the hosted-kernel install cell (``llm_dataflow.live.hosted_install_cell``),
   tagged ``remove-cell`` so the web page hides it while downloads and Colab/Binder keep it.
2. nbval markers are exact (nbval 0.11 ignores ``# NBVAL_IGNORE_OUTPUT: reason`` silently): a
   marker line is only the marker; the reason goes on the next line.
3. Every code cell that outputs a figure has alt text in ``metadata.mystnb.image.alt``, taken from
   the "Figure: …" paragraph of the markdown cell before it (CONTRIBUTING.md).
"""
from __future__ import annotations

import pathlib
import re
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
TAG = "remove-cell"
MARK = "# Colab, Binder or a JupyterHub without this book's package"


def _figure_alt(md: str) -> str | None:
    m = re.search(r"Figure:\s*(.+?)(?:\n\s*\n|$)", md, flags=re.S)
    return " ".join(m.group(1).split()) if m else None


def process(path: pathlib.Path, fix: bool) -> list[str]:
    from llm_dataflow.live import hosted_install_cell

    nb = nbformat.read(path, as_version=4)
    problems, changed = [], False
    install = hosted_install_cell()
    first = nb.cells[0] if nb.cells else None
    has = first is not None and first.cell_type == "code" and first.source.startswith(MARK)
    if fix and (not has or first.source != install or TAG not in first.metadata.get("tags", [])):
        cell = nbformat.v4.new_code_cell(install, metadata={"tags": [TAG]})
        if has:
            cell.execution_count, cell.outputs = first.execution_count, first.outputs
            nb.cells[0] = cell
        else:
            nb.cells.insert(0, cell)
        changed = has = True
    if not has:
        problems.append(f"{path.name}: first cell is not the hosted-kernel install cell")
    elif nb.cells[0].source != install or TAG not in nb.cells[0].metadata.get("tags", []):
        problems.append(f"{path.name}: the install cell differs from hosted_install_cell() or lacks the tag")
    markers = {"# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP", "# NBVAL_CHECK_OUTPUT", "# NBVAL_RAISES_EXCEPTION"}
    for i, cell in enumerate(nb.cells):
        for line in cell.source.splitlines() if cell.cell_type == "code" else []:
            if line.lstrip().startswith("# NBVAL") and line.strip() not in markers:
                problems.append(f"{path.name}: cell {i} has an inexact nbval marker {line.strip()!r}")
    last_md = ""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            last_md = cell.source
            continue
        # the code cell right after a "Figure: …" paragraph draws that figure (outputs or not yet)
        alt, last_md = _figure_alt(last_md), ""
        have = cell.metadata.get("mystnb", {}).get("image", {}).get("alt")
        if alt and fix and have != alt:
            cell.metadata.setdefault("mystnb", {}).setdefault("image", {})["alt"] = alt
            have, changed = alt, True
        if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            continue
        if not have:
            problems.append(f"{path.name}: cell {i} shows a figure without alt text "
                            "(write a 'Figure: …' paragraph in the markdown cell before it)")
    if changed:
        nbformat.write(nb, path)
    return problems


def main(argv: list[str]) -> int:
    fix = "--fix" in argv
    paths = [pathlib.Path(a) for a in argv if not a.startswith("--")] or sorted(
        (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    problems = [p for path in paths for p in process(path, fix)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
