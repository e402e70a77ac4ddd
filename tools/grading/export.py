"""Scores in the formats of the graders and gradebooks instructors already use.

* **Canvas** gradebook import (CSV).  The importer (``app/models/gradebook_importer.rb`` of
  instructure/canvas-lms, https://github.com/instructure/canvas-lms) takes a header whose first
  column contains ``Student`` and second ``ID``, optionally ``SIS User ID`` and ``SIS Login ID``,
  then ``Section`` as the last student column; every further column is an assignment (matched by
  title, created when new); a row starting ``Points Possible`` gives each assignment's points; a
  student is found by ``ID``, else by SIS User ID / SIS Login ID, else by name.  Blank cells
  change nothing.  With ``--roster`` (the CSV Canvas exports from your gradebook) the names, IDs
  and sections come from it; without, a student's folder name goes into ``Student`` and
  ``SIS Login ID``.
* **Moodle** grade import (CSV; ``grade/import/csv/classes/load_data.php`` of moodle/moodle,
  commit 162f42f0dae3758c9e9b9973749b0a7cd28d9312; https://docs.moodle.org/en/Grade_import): a
  header row, one column that identifies the user (mapped on import to ``username``,
  ``useremail``, ``useridnumber`` or ``userid``), one numeric column per grade item and,
  optionally, a feedback column mapped to it.  Here: ``Username``, then ``chNN`` and
  ``chNN feedback`` per assignment.
* **Gradescope** autograder (https://gradescope-autograders.readthedocs.io/en/latest/specs/;
  gradescope/autograder_samples ``docs/specs.md`` at commit af5dee4cf9b2c930c47dc0e4320c7e5ab2580564):
  a zip with ``setup.sh`` and ``run_autograder`` at its root; ``run_autograder`` grades
  ``/autograder/submission`` and writes ``/autograder/results/results.json`` with a ``tests``
  list (``score``, ``max_score``, ``status``, ``name``, ``number``, ``output``, ``visibility``).
  Gradescope runs the autograder as root in one container with its files: here the student's
  kernel runs as an unprivileged account that cannot read ``/autograder/source`` (the spec and
  its keys), and imports the package from a readable copy.
"""
from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import zipfile
from pathlib import Path

from . import engine, spec

TOOLS = Path(__file__).resolve().parents[1]
ROOT = TOOLS.parent
PACKAGE = ROOT / "src" / "llm_dataflow"
#: what the autograder's environment installs (pinned to the versions this grader was tested with)
GRADER_REQUIREMENTS = ("numpy", "safetensors", "ipykernel", "jupyter_client", "pyzmq", "psutil")
#: Gradescope shows hidden tests to students once the assignment's due date has passed
HIDDEN_VISIBILITY = "after_due_date"


def read_scores(path: Path) -> list[dict]:
    """The grader's CSV (``tools/grade.py grade -o``) as dicts."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _totals(rows: list[dict]) -> tuple[list[str], list[str], dict, dict, dict]:
    """(students, assignments, score[(student, a)], max[a], feedback[(student, a)])."""
    students, names, score, mx, fb = [], [], {}, {}, {}
    for r in rows:
        s, a = r["student"], r["assignment"]
        if s not in students:
            students.append(s)
        if a not in names:
            names.append(a)
        score[(s, a)] = score.get((s, a), 0.0) + float(r["score"])
        mx.setdefault(a, {})[r["question"]] = float(r["max_score"])
        line = f"{r['question']}: {float(r['score']):g}/{float(r['max_score']):g}"
        if r.get("message"):
            line += f" ({r['message']})"
        fb.setdefault((s, a), []).append(line)
    return students, sorted(names), score, {a: sum(q.values()) for a, q in mx.items()}, fb


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def write_canvas(rows: list[dict], path: Path, roster: Path | None = None) -> None:
    """A CSV for Canvas's *Import* in the gradebook (see the module docstring)."""
    students, names, score, mx, _ = _totals(rows)
    known: dict[str, list] = {}
    if roster is not None:
        with open(roster, newline="", encoding="utf-8-sig") as fh:
            rr = list(csv.reader(fh))
        head = rr[0]
        col = {h.strip(): i for i, h in enumerate(head)}
        for row in rr[1:]:
            if not row or row[0].strip().startswith(("Points Possible", "Student, Test")):
                continue
            ident = [row[col[k]] if k in col and col[k] < len(row) else "" for k in
                     ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")]
            for key in ident[1:4] + ident[:1]:
                if key:
                    known.setdefault(key, ident)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *names])
        w.writerow(["Points Possible", "", "", "", "", *[_num(mx[a]) for a in names]])
        for s in students:
            ident = known.get(s) or [s, "", "", s, ""]
            w.writerow([*ident, *[_num(score[(s, a)]) if (s, a) in score else "" for a in names]])


def write_moodle(rows: list[dict], path: Path) -> None:
    """A CSV for Moodle's *Import ▸ CSV file* (see the module docstring)."""
    students, names, score, _, fb = _totals(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Username", *[c for a in names for c in (a, f"{a} feedback")]])
        for s in students:
            cells = []
            for a in names:
                if (s, a) in score:
                    cells += [_num(score[(s, a)]), "; ".join(fb[(s, a)])[:2000]]
                else:
                    cells += ["-", ""]
            w.writerow([s, *cells])


# -------------------------------------------------------------------------------------------------
# Gradescope
# -------------------------------------------------------------------------------------------------
def results_json(r: engine.SubmissionResult, hidden_visibility: str = HIDDEN_VISIBILITY) -> dict:
    """Gradescope's ``results.json`` for one graded submission: two tests per question (public,
    always visible; hidden, visible per ``hidden_visibility``), each with its message."""
    tests = []
    for i, q in enumerate(r.questions, 1):
        for j, (label, test, pts, vis) in enumerate((("public", q.public, q.public_points, "visible"),
                                                     ("hidden", q.hidden, q.hidden_points, hidden_visibility)), 1):
            passed = bool(test and test.passed)
            out = "passed" if passed else (test.message if test else "not graded")
            if j == 1 and (q.notes or q.tampering):
                out += "\n" + "\n".join(dict.fromkeys(q.notes + q.tampering))
            tests.append({"name": f"Q{i} {label} tests: {q.title}", "number": f"{i}.{j}",
                          "score": pts if passed else 0.0, "max_score": pts,
                          "status": "passed" if passed else "failed", "output": out,
                          "output_format": "text", "visibility": vis})
    top = [f"{r.assignment}: {r.score:g} / {r.max_score:g}"]
    top += r.notes
    return {"score": r.score, "execution_time": int(round(r.seconds)), "output": "\n".join(top),
            "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


_RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission, as root (working directory /autograder); it grades
# the notebook in /autograder/submission and writes /autograder/results/results.json.
set -u
ROOT="${{LDF_AUTOGRADER_ROOT:-/autograder}}"
PY="${{LDF_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
KUSER="${{LDF_KERNEL_USER-ldf-student}}"
mkdir -p "$ROOT/results"
# The student's kernel runs as the unprivileged $KUSER (made by setup.sh): it imports the package
# from a copy it can read, while the grader and the assignment's spec (its keys) stay root's only.
rm -rf "$ROOT/pkg" && cp -r "$ROOT/source/grader/src" "$ROOT/pkg" && chmod -R a+rX "$ROOT/pkg"
USER_ARGS=()
if [ "$(id -u)" = 0 ] && [ -n "$KUSER" ] && id -u "$KUSER" >/dev/null 2>&1; then
    chmod -R go-rwx "$ROOT/source"
    USER_ARGS=(--kernel-user "$KUSER")
fi
cd "$ROOT/source/grader"
PYTHONPATH="$ROOT/pkg" "$PY" tools/grade.py gradescope-run {name} --source assignments/source \\
    --submission "$ROOT/submission" --results "$ROOT/results/results.json" --timeout {timeout}{seed} "${{USER_ARGS[@]}}"
"""

_SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
set -euo pipefail
apt-get update
apt-get install -y python3 python3-venv python3-pip
PY=python3
for v in 3.13 3.12 3.11; do      # the pinned NumPy needs Python >= 3.11
    if apt-get install -y "python$v" "python$v-venv" >/dev/null 2>&1; then PY="python$v"; break; fi
done
"$PY" -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install -r /autograder/source/requirements.txt
# the account the students' kernels run as (run_autograder): it cannot read /autograder/source
id -u ldf-student >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin ldf-student
"""


def requirements() -> str:
    """Pinned requirements of the autograder (the versions this grader runs with)."""
    lines = []
    for p in GRADER_REQUIREMENTS:
        try:
            lines.append(f"{p}=={importlib.metadata.version(p)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(p)
    return "\n".join(lines) + "\n"


def gradescope_zip(name: str, out: Path, source: Path, seed: int | None = None, timeout: float = 60.0) -> Path:
    """Write a Gradescope autograder for the assignment ``name`` (of class ``seed``): its
    ``setup.sh`` and ``run_autograder`` at the root, the grader, this assignment's spec and the
    package's source under ``grader/``.

    Raises:
        FileNotFoundError: no spec for ``name`` under ``source``.
    """
    spec.load(source, name, seed)                       # fails early on a bad name
    out.parent.mkdir(parents=True, exist_ok=True)
    seed_arg = f" --seed {seed}" if seed is not None else ""

    def add_tree(z, folder: Path, prefix: str):
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                z.write(p, f"{prefix}/{p.relative_to(folder).as_posix()}")

    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for fname, text in (("setup.sh", _SETUP), ("run_autograder", _RUN.format(name=name, timeout=timeout, seed=seed_arg))):
            info = zipfile.ZipInfo(fname)
            info.external_attr = 0o755 << 16
            z.writestr(info, text)
        z.writestr("requirements.txt", requirements())
        z.write(TOOLS / "grade.py", "grader/tools/grade.py")
        add_tree(z, TOOLS / "grading", "grader/tools/grading")
        z.write(Path(source) / name / f"{name}.py", f"grader/assignments/source/{name}/{name}.py")
        add_tree(z, PACKAGE, "grader/src/llm_dataflow")
    return out


def gradescope_run(name: str, submission: Path, results: Path, source: Path, seed: int | None = None,
                   timeout: float = 60.0, kernel_user: str | None = None) -> int:
    """Grade the notebook Gradescope put in ``submission`` and write ``results`` (always: a
    missing notebook scores zero with a message saying so)."""
    a = spec.load(source, name, seed)
    cands = sorted(Path(submission).rglob(f"{name}.ipynb")) or sorted(Path(submission).rglob("*.ipynb"))
    results.parent.mkdir(parents=True, exist_ok=True)
    if len(cands) != 1 and not (cands and cands[0].name == f"{name}.ipynb"):
        msg = (f"no notebook found: upload {name}.ipynb" if not cands else
               f"{len(cands)} notebooks found ({', '.join(p.name for p in cands)}): upload only {name}.ipynb")
        res = {"score": 0.0, "output": msg, "output_format": "text", "visibility": "visible",
               "tests": [{"name": "submission", "score": 0.0, "max_score": a.points, "status": "failed",
                          "output": msg, "visibility": "visible"}]}
    else:
        r = engine.grade_submission(a, cands[0], "submission", timeout=timeout, kernel_user=kernel_user)
        res = results_json(r)
    tmp = results.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, results)
    return 0
