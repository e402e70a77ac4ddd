"""The notebooks of an assignment: the instructor's nbgrader source notebook and the student
version, both made from the spec (:mod:`grading.spec`), and a submission put back into shape
before it is graded.

Every cell has a fixed id (``ch06-q1``, ``ch06-q1-public`` …, the same in every version and
every class's variant), so a submission is matched to its assignment cell by cell: by id, else by
nbgrader's ``grade_id``, else (an answer only) by the names the answer defines.  Locked cells —
the text, the set-up code, the test cells — are always taken from the assignment, never from the
submission; a deleted, edited or metadata-stripped test cell is restored and reported, and
changed points are ignored and reported.
"""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .spec import Assignment, student_code

HIDDEN_NOTE = "# Hidden tests run when the instructor grades."
COURSE_ID = "llm_dataflow"
NB_METADATA = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
               "language_info": {"name": "python"}}


@dataclass
class Cell:
    """A cell of an assignment.  ``kind``: ``markdown``, ``setup``, ``answer``, ``public`` or
    ``hidden``; ``key`` is its text in the instructor's source, ``text`` in the student version."""

    id: str
    kind: str
    qid: str | None
    key: str
    text: str
    grade_id: str
    points: float = 0.0

    @property
    def cell_type(self) -> str:
        return "markdown" if self.kind == "markdown" else "code"


def cells(a: Assignment) -> list[Cell]:
    """The cells of ``a`` in order."""
    out = [Cell(f"{a.name}-intro", "markdown", None, f"# {a.title}\n\n{a.intro.strip()}", "", "intro"),
           Cell(f"{a.name}-setup", "setup", None, a.setup.strip(), a.setup.strip(), "setup")]
    for q in a.questions:
        n = q.id[1:]
        head = f"## Q{n} — {q.title} ({q.points:g} point{'s' if q.points != 1 else ''})"
        prose = f"{head}\n\n{q.prose.strip()}\n\n**Returns:** {q.returns.strip()}"
        out.append(Cell(f"{a.name}-{q.id}-text", "markdown", q.id, prose, prose, f"{q.id}_text"))
        if q.setup.strip():
            out.append(Cell(f"{a.name}-{q.id}-setup", "setup", q.id, q.setup.strip(), q.setup.strip(), f"{q.id}_setup"))
        out.append(Cell(f"{a.name}-{q.id}", "answer", q.id, q.answer.strip(), student_code(q.answer.strip()), q.id))
        out.append(Cell(f"{a.name}-{q.id}-public", "public", q.id, q.public.strip(), q.public.strip(),
                        f"{q.id}_public", q.public_points))
        hidden = f"{HIDDEN_NOTE}\n### BEGIN HIDDEN TESTS\n{q.hidden.strip()}\n### END HIDDEN TESTS"
        out.append(Cell(f"{a.name}-{q.id}-hidden", "hidden", q.id, hidden, HIDDEN_NOTE, f"{q.id}_hidden", q.hidden_points))
    for c in out:
        c.text = c.text if c.kind != "markdown" else c.key
    return out


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + [parts[-1]]


def _nbgrader_meta(c: Cell) -> dict:
    m = {"grade": c.kind in ("public", "hidden"), "grade_id": c.grade_id, "locked": c.kind != "answer",
         "schema_version": 3, "solution": c.kind == "answer"}
    if c.kind in ("public", "hidden"):
        m["points"] = c.points if c.points != int(c.points) else int(c.points)
    return m


def source_notebook(a: Assignment) -> dict:
    """The instructor's nbgrader source notebook of ``a`` (solutions and hidden tests in it)."""
    nb_cells = []
    for c in cells(a):
        cell = {"cell_type": c.cell_type, "id": c.id, "metadata": {"nbgrader": _nbgrader_meta(c)}, "source": _lines(c.key)}
        if c.cell_type == "code":
            cell.update(execution_count=None, outputs=[])
        nb_cells.append(cell)
    return {"cells": nb_cells, "metadata": dict(NB_METADATA), "nbformat": 4, "nbformat_minor": 5}


def write_json(path: Path, nb: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


_GENERATE = """
import sys
from nbgrader.apps import NbGraderAPI
from traitlets.config import Config
c = Config()
c.CourseDirectory.root, c.CourseDirectory.db_url = sys.argv[1], "sqlite:///" + sys.argv[2]
c.CourseDirectory.course_id = sys.argv[3]
api = NbGraderAPI(config=c)
failed = 0
for name in sys.argv[4:]:
    res = api.generate_assignment(name, force=True, create=True)
    if not res["success"]:
        failed += 1
        print(name, res.get("error"), res.get("log"))
sys.exit(1 if failed else 0)
"""


def nbgrader_release(sources: dict[str, Path], out: Path) -> dict[str, Path]:
    """Run nbgrader's ``generate_assignment`` on the source notebooks ``{name: path}`` (only the
    notebook is copied into nbgrader's course: nothing else of the source folder reaches the
    student version) and write each student version to ``out/<name>/<name>.ipynb``.

    Raises:
        RuntimeError: nbgrader failed (its output is in the message).
    """
    written = {}
    with tempfile.TemporaryDirectory(prefix="ldf-gen-") as tmp:
        course, db = Path(tmp) / "course", Path(tmp) / "db" / "gradebook.db"
        db.parent.mkdir(parents=True)
        for name, nb in sources.items():
            (course / "source" / name).mkdir(parents=True)
            shutil.copyfile(nb, course / "source" / name / f"{name}.ipynb")
        env = _nbgrader_env(Path(tmp))
        r = subprocess.run([sys.executable, "-c", _GENERATE, str(course), str(db), COURSE_ID, *sources], cwd=course,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        missing = [n for n in sources if not (course / "release" / n / f"{n}.ipynb").is_file()]
        if r.returncode or missing:
            raise RuntimeError(f"nbgrader generate_assignment failed for {missing or list(sources)}:\n{r.stdout}")
        for name in sources:
            dst = out / name / f"{name}.ipynb"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(course / "release" / name / f"{name}.ipynb", dst)
            written[name] = dst
    return written


def _nbgrader_env(home: Path) -> dict:
    import os

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for d in ("home", "tmp"):
        (home / d).mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home / "home"), TMPDIR=str(home / "tmp"), JUPYTER_RUNTIME_DIR=str(home / "tmp"))
    env.pop("JUPYTER_CONFIG_DIR", None)
    return env


# -------------------------------------------------------------------------------------------------
# Restoring a submission
# -------------------------------------------------------------------------------------------------
@dataclass
class Graded:
    """A cell as it will run: the assignment's cell (``cell``), the text that runs, and what was
    wrong with the submitted copy (``notes``).  ``kind`` ``extra`` is a cell the student added."""

    kind: str
    qid: str | None
    source: str
    cell: Cell | None = None
    notes: list = field(default_factory=list)


@dataclass
class Restored:
    cells: list
    notes: dict          # qid (or "") → list of notes
    tampering: dict      # qid (or "") → list of notes that say a test cell was changed


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else str(s)


def _defines(source: str) -> set[str]:
    """Names a cell's code defines at top level (functions, classes, assignments)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.add(n.id)
    return out


def load_submission(path: Path) -> dict:
    """A submitted notebook's JSON.

    Raises:
        ValueError: not a readable notebook (the message says why).
    """
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a readable notebook: {exc}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook: no list of cells")
    return nb


def restore(a: Assignment, submission: dict) -> Restored:
    """The cells to run for ``submission``: the assignment's locked cells, the student's answer
    cells and any cells the student added, with notes on what had to be put back."""
    sub = [c for c in submission.get("cells", []) if isinstance(c, dict)]
    by_id, by_gid = {}, {}
    for i, c in enumerate(sub):
        if isinstance(c.get("id"), str):
            by_id.setdefault(c["id"], i)
        gid = ((c.get("metadata") or {}).get("nbgrader") or {}).get("grade_id") if isinstance(c.get("metadata"), dict) else None
        if isinstance(gid, str):
            by_gid.setdefault(gid, i)
    ours = cells(a)
    qnames = {q.id: set(q.names) for q in a.questions}
    used: dict[int, int] = {}          # submission index → our index
    match: dict[int, int] = {}         # our index → submission index
    notes: dict = {}
    tampering: dict = {}

    def note(qid, text, tamper=False):
        notes.setdefault(qid or "", []).append(text)
        if tamper:
            tampering.setdefault(qid or "", []).append(text)

    for j, c in enumerate(ours):
        i = by_id.get(c.id)
        if i is None or i in used:
            i = by_gid.get(c.grade_id) if c.kind != "markdown" else None
            if i is not None and i in used:
                i = None
        if i is not None:
            used[i], match[j] = j, i
    # cells that lost both id and metadata (an editor that drops them): a locked cell by its text
    for j, c in enumerate(ours):
        if j not in match and c.kind != "answer":
            for i, s in enumerate(sub):
                if i not in used and s.get("cell_type") == c.cell_type and _src(s).strip() == c.text.strip():
                    used[i], match[j] = j, i
                    break
    # an answer the student moved into another cell: the first unmatched code cell defining its names
    for j, c in enumerate(ours):
        if c.kind == "answer" and j not in match:
            for i, s in enumerate(sub):
                if i not in used and s.get("cell_type") == "code" and qnames[c.qid] & _defines(_src(s)):
                    used[i], match[j] = j, i
                    note(c.qid, f"answer cell {c.id} not found; graded the cell that defines "
                                f"{', '.join(sorted(qnames[c.qid] & _defines(_src(s))))}")
                    break
    graded: dict[int, list] = {j: [] for j in range(-1, len(ours))}
    last = -1
    for i, s in enumerate(sub):
        if i in used:
            last = used[i]
        elif s.get("cell_type") == "code" and _src(s).strip():
            graded[last].append(Graded("extra", None, _src(s)))
    out = list(graded[-1])
    for j, c in enumerate(ours):
        i = match.get(j)
        s = sub[i] if i is not None else None
        g = Graded(c.kind, c.qid, c.text, c)
        if c.kind == "answer":
            if s is None:
                note(c.qid, f"answer cell {c.id} missing: graded as unanswered")
            else:
                g.source = _src(s)
                if s.get("cell_type") != "code":
                    g.source = ""
                    note(c.qid, f"answer cell {c.id} was turned into a {s.get('cell_type')} cell: graded as unanswered")
        elif c.kind in ("public", "hidden", "setup"):
            _compare(c, s, lambda t, tamper=True: note(c.qid, t, tamper))
        out.append(g)
        out.extend(graded[j])
    return Restored(out, notes, tampering)


def _compare(c: Cell, s: dict | None, note) -> None:
    """Notes on a submitted copy ``s`` of the locked cell ``c`` (restored whatever they say)."""
    label = {"public": "public test cell", "hidden": "hidden test cell", "setup": "set-up cell"}[c.kind]
    if s is None:
        note(f"{label} {c.grade_id} deleted (restored)")
        return
    meta = (s.get("metadata") or {}).get("nbgrader") if isinstance(s.get("metadata"), dict) else None
    if not isinstance(meta, dict):
        note(f"{label} {c.grade_id}: nbgrader metadata stripped (restored)", tamper=False)
    else:
        if c.kind in ("public", "hidden") and meta.get("points") is not None and meta.get("points") != c.points:
            note(f"{label} {c.grade_id}: points changed from {c.points:g} to {meta.get('points')} (ignored)")
        if bool(meta.get("grade")) != (c.kind in ("public", "hidden")) or meta.get("solution"):
            note(f"{label} {c.grade_id}: nbgrader metadata changed (restored)")
    if _src(s).strip() != c.text.strip():
        note(f"{label} {c.grade_id} edited (restored)")


def student_notebook(restored: Restored) -> dict:
    """The restored submission as a notebook (what the kernel's folder holds)."""
    nb_cells = []
    for g in restored.cells:
        kind = "markdown" if g.kind == "markdown" else "code"
        cell = {"cell_type": kind, "metadata": {}, "source": _lines(g.source)}
        if g.cell is not None:
            cell["id"] = g.cell.id
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        nb_cells.append(cell)
    return {"cells": nb_cells, "metadata": dict(NB_METADATA), "nbformat": 4, "nbformat_minor": 5}
