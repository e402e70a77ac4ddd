"""A student's feedback: their graded notebook as HTML in nbgrader's own feedback layout (the
``feedback`` template nbgrader's ``generate_feedback`` uses), with each question's score, the
outputs of their answer cells, and under each test cell which tests failed and why.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from . import notebooks
from .engine import SubmissionResult
from .spec import Assignment


def _stream(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _verdict(test, label: str) -> list[dict]:
    """The grader's verdict as the test cell's output (wrapped: the page does not wrap it)."""
    if test is None:
        return []
    if test.passed:
        return [_stream(f"✔ {label} passed\n")]
    text = textwrap.fill(f"✘ {label} failed: {test.message}", width=110, subsequent_indent="  ")
    return [{"output_type": "stream", "name": "stderr", "text": text + "\n"}]


def graded_notebook(r: SubmissionResult) -> dict:
    """The restored submission with outputs, scores and comments, as nbgrader's feedback
    template reads them (``metadata.nbgrader.score``/``points``, ``comment``)."""
    byq = {q.qid: q for q in r.questions}
    cells = []
    for i, (g, run) in enumerate(r.cells):
        kind = "markdown" if g.kind == "markdown" else "code"
        cell = {"cell_type": kind, "id": g.cell.id if g.cell is not None else f"added-{i}", "metadata": {},
                "source": g.source}
        if kind == "code":
            cell.update(execution_count=None, outputs=list(run.outputs) if run is not None else [])
        c, q = g.cell, byq.get(g.qid)
        if c is not None:
            meta = notebooks._nbgrader_meta(c)
            if c.kind == "answer" and q is not None:
                comments = list(q.notes)
                if q.answer_status and q.answer_status not in ("ok",):
                    comments.append(f"this cell: {q.answer_status}")
                meta["comment"] = "\n\n".join(comments) if comments else None
            if c.kind in ("public", "hidden") and q is not None:
                test = q.public if c.kind == "public" else q.hidden
                meta["score"] = c.points if (test and test.passed) else 0.0
                cell["outputs"] = _verdict(test, f"{c.kind} tests of Q{q.qid[1:]}")
                if c.kind == "hidden":
                    cell["source"] = "# Hidden tests (run by the grader, in the grader's process)"
            cell["metadata"]["nbgrader"] = meta
        if g.kind == "extra":
            cell["metadata"]["nbgrader"] = {"solution": True, "grade": False, "grade_id": "added", "locked": False,
                                            "comment": "a cell you added (it ran before the tests)"}
        cells.append(cell)
    if r.notes:
        cells.insert(0, {"cell_type": "markdown", "id": "grader-notes", "metadata": {},
                         "source": "**Grader notes:** " + "; ".join(r.notes)})
    return {"cells": cells, "metadata": dict(notebooks.NB_METADATA), "nbformat": 4, "nbformat_minor": 5}


def html(r: SubmissionResult, a: Assignment) -> str:
    """The feedback page of ``r`` (nbgrader's template through nbconvert's HTML exporter)."""
    import nbformat
    import nbgrader
    from nbconvert.exporters import HTMLExporter
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from traitlets.config import Config

    base = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    c = Config()
    c.HTMLExporter.template_name = "feedback"
    c.HTMLExporter.extra_template_basedirs = [str(base / "templates")]
    c.HTMLExporter.extra_template_paths = [str(base / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    exporter = HTMLExporter(config=c)
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor(config=c), enabled=True)
    nb = nbformat.from_dict(graded_notebook(r))
    resources = {"nbgrader": {"notebook": f"{r.assignment} — {r.student}", "assignment": r.assignment,
                              "student": r.student, "score": r.score, "max_score": r.max_score, "late_penalty": 0}}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    return body


def write(r: SubmissionResult, a: Assignment, path: Path) -> Path:
    """Write the feedback page of ``r`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html(r, a), encoding="utf-8")
    return path
