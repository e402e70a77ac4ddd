"""Check (or fix) what every chapter notebook must carry for the web book and hosted kernels.

    python tools/notebook_hygiene.py          # check: exit 1 and list problems
    python tools/notebook_hygiene.py --fix    # insert/refresh, then check
    python tools/notebook_hygiene.py --fix --before-run   # the same, without the checks a run makes hold

1. The first cell is the hosted-kernel install cell (``llm_dataflow.live.hosted_install_cell``),
   tagged ``remove-cell`` so the web page hides it while downloads and Colab/Binder keep it.
2. nbval options are cell tags, not comment markers readers would see in the code:
   ``--fix`` moves a ``# NBVAL_IGNORE_OUTPUT`` line (or ``# NBVAL_SKIP``, ``# NBVAL_CHECK_OUTPUT``,
   ``# NBVAL_RAISES_EXCEPTION``; also the inexact ``# NBVAL_IGNORE_OUTPUT: reason``, whose reason
   stays as a comment) into the tag nbval reads (``nbval-ignore-output``, ``nbval-skip``,
   ``nbval-check-output``, ``raises-exception``); the comment saying why stays in the code.
3. Every code cell that outputs a figure has alt text in ``metadata.mystnb.image.alt``, taken from
   the "Figure: …" paragraph of the markdown cell before it (CONTRIBUTING.md).
4. The notebook names its kernel exactly as the installed ``python3`` kernel spec does
   (``KERNELSPEC``): without it (or with another display name) JupyterLab writes one on open and
   the notebook opens marked modified.  ``--fix`` also drops nbclient's per-cell timing metadata
   (``metadata.execution``), which changes on every run and means nothing to a reader.

5. One run per notebook, not edited after it: ``tools/execute_notebooks.py`` writes
   ``metadata.llm_dataflow.outputs_sha256`` (:func:`outputs_digest`, over every code cell's source
   and outputs); a notebook whose sources or outputs changed since (an output edited by hand, a
   cell pasted from another run, a source changed without re-executing) fails.  Every code cell
   that prints a measured value (``(measured)`` in its text outputs) carries the run stamp
   (``llm_dataflow.measure.run_stamp``), and all stamps of a notebook are one: one kernel on one
   machine made every measured number the chapter shows.

``--fix`` changes sources and metadata only, never outputs (and so never the digest's outputs).
"""
from __future__ import annotations

import pathlib
import re
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
TAG = "remove-cell"
MARK = "# Colab, Binder or a JupyterHub without this book's package"
#: ipykernel's spec of the ``python3`` kernel (``jupyter kernelspec list --json``), as JupyterLab
#: writes it into a notebook it runs.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
#: nbval's comment markers and the cell tags with the same meaning (nbval 0.11 reads both).
MARKER_TAGS = {"# NBVAL_IGNORE_OUTPUT": "nbval-ignore-output", "# NBVAL_SKIP": "nbval-skip",
               "# NBVAL_CHECK_OUTPUT": "nbval-check-output",
               "# NBVAL_RAISES_EXCEPTION": "raises-exception"}


def markers_to_tags(cell) -> bool:
    """Move nbval comment markers of a code cell into its tags; True if the cell changed.

    ``# NBVAL_IGNORE_OUTPUT`` → tag ``nbval-ignore-output`` (line removed);
    ``# NBVAL_IGNORE_OUTPUT: why`` → the tag, and the line becomes ``# why``.
    """
    if cell.cell_type != "code":
        return False
    lines, kept, tags = cell.source.split("\n"), [], list(cell.metadata.get("tags", []))
    for line in lines:
        m = re.match(r"^\s*(# NBVAL_[A-Z_]+)\s*[:\-]?\s*(.*)$", line)
        if not m or m.group(1) not in MARKER_TAGS:
            kept.append(line)
            continue
        tag = MARKER_TAGS[m.group(1)]
        if tag not in tags:
            tags.append(tag)
        if m.group(2):
            kept.append(line[:len(line) - len(line.lstrip())] + "# " + m.group(2))
    if kept == lines:
        return False
    cell.source = "\n".join(kept)
    cell.metadata["tags"] = tags
    return True


#: The run stamp as it is printed (``llm_dataflow.measure.RUN_STAMP_RE``; kept here as text so the
#: check runs without importing torch).
STAMP_RE = re.compile(r"\[run [0-9a-f]{6} · [^\]\n]*\]")


def outputs_digest(nb) -> str:
    """SHA-256 over every code cell's source and outputs (canonical JSON): what
    ``tools/execute_notebooks.py`` saves in ``metadata.llm_dataflow.outputs_sha256``."""
    import hashlib
    import json

    cells = [[c.source, c.get("outputs", [])] for c in nb.cells if c.cell_type == "code"]
    text = json.dumps(cells, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _text_outputs(cell) -> str:
    """The text a code cell's outputs show (streams, text/plain, text/html; not figures)."""
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"]))
        for mime in ("text/plain", "text/html"):
            v = o.get("data", {}).get(mime, "")
            parts.append(v if isinstance(v, str) else "".join(v))
    return "\n".join(parts)


def run_problems(nb, name: str) -> list[str]:
    """The one-run checks (item 5 of this module's docstring) on a notebook's RAW saved outputs."""
    problems = []
    saved = nb.metadata.get("llm_dataflow", {}).get("outputs_sha256")
    if saved is None:
        problems.append(f"{name}: no outputs digest; execute it with tools/execute_notebooks.py")
    elif saved != outputs_digest(nb):
        problems.append(f"{name}: sources or outputs changed after execution (digest differs); "
                        "re-execute it with tools/execute_notebooks.py")
    stamps = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        text = _text_outputs(cell)
        found = set(STAMP_RE.findall(text))
        stamps |= found
        if ("(measured)" in text or "(modelled from measured)" in text) and not found:
            problems.append(f"{name}: cell {i} prints a measured value without the run stamp")
    if len(stamps) > 1:
        problems.append(f"{name}: measured outputs from {len(stamps)} runs: {sorted(stamps)}")
    return problems


def _figure_alt(md: str) -> str | None:
    """The "Figure: …" paragraph of ``md`` as alt text: a citation role is dropped (a key is no
    words to hear), a ``{term}``/``{doc}``/``{ref}`` role keeps its text; TeX and Markdown
    markers stay for the book to turn into spoken text (``book/_ext/ldf_math.py``, plain_alt)."""
    m = re.search(r"Figure:\s*(.+?)(?:\n\s*\n|$)", md, flags=re.S)
    if not m:
        return None
    text = re.sub(r"\s*\{cite(?::\w+)?\}`[^`]*`", "", m.group(1))
    text = re.sub(r"\{(?:term|doc|ref|numref)\}`([^`<]*?)\s*(?:<[^`]*>)?`", r"\1", text)
    return " ".join(text.split())


def process(path: pathlib.Path, fix: bool, run_checks: bool = True) -> list[str]:
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
    for i, cell in enumerate(nb.cells):
        if fix and markers_to_tags(cell):
            changed = True
        for line in cell.source.splitlines() if cell.cell_type == "code" else []:
            if line.lstrip().startswith("# NBVAL"):
                problems.append(f"{path.name}: cell {i} has the nbval marker {line.strip()!r} in its code; "
                                "use the cell tag (--fix moves it)")
        if fix and "execution" in cell.metadata:
            del cell.metadata["execution"]
            changed = True
    if fix and nb.metadata.get("kernelspec") != KERNELSPEC:
        nb.metadata["kernelspec"] = dict(KERNELSPEC)
        changed = True
    if nb.metadata.get("kernelspec") != KERNELSPEC:
        problems.append(f"{path.name}: metadata.kernelspec is {nb.metadata.get('kernelspec')!r}, "
                        f"not {KERNELSPEC!r} (JupyterLab would mark it modified on open)")
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
    if run_checks:    # not before a run (`--before-run`): the run is what makes them hold
        problems += run_problems(nb, path.name)
    if changed:
        nbformat.write(nb, path)
    return problems


def main(argv: list[str]) -> int:
    fix = "--fix" in argv
    run_checks = "--before-run" not in argv     # `make notebooks` fixes sources first, then runs
    paths = [pathlib.Path(a) for a in argv if not a.startswith("--")] or sorted(
        (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    problems = [p for path in paths for p in process(path, fix, run_checks)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
