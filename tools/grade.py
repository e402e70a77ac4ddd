#!/usr/bin/env python
"""Graded assignments: generate student notebooks and grade a folder of submissions (nbgrader).

Instructor commands (run from the repository root, with the project's virtual environment)::

    python tools/grade.py generate                      # assignments/source → assignments/release
    python tools/grade.py grade SUBMISSIONS -o scores.csv
    python tools/grade.py selfcheck                     # every chapter: solutions full, students zero

``SUBMISSIONS`` holds one folder per student, each with the notebooks that student returned,
named like the assignment (``alice/ch06.ipynb``; nbgrader's ``alice/ch06/ch06.ipynb`` works too).
The CSV has one row per student, assignment and question: ``student, assignment, question,
score, max_score, status`` (status ``ok``, or the first error: ``timeout``, ``NotImplementedError``,
``AssertionError``…, or ``grader: …`` when the whole submission failed).

How a submission is contained:

* Each submission is graded in its own temporary copy of the course (source, gradebook and the
  submitted notebook), by its own ``nbgrader autograde`` process, whose kernel runs inside that
  copy with ``HOME`` and ``TMPDIR`` pointing into it.  The submitted file and the instructor's
  sources are never opened for writing; the copy is deleted afterwards.
* Every cell has a time limit (``--timeout``, per question); a cell that overruns is interrupted
  and the rest of the notebook still runs.  A whole submission has a wall-clock limit
  (``--submission-timeout``); past it the process tree is killed and the submission scores zero
  with status ``grader: timeout``.  Errors never stop the run: the next submission is graded.
* Test cells and read-only cells are restored from the source before execution (nbgrader's
  ``OverwriteCells``), so editing a test does not change what is checked (a deleted test cell
  scores zero, status ``test cell deleted``); hidden tests exist only in the source.

This is containment against mistakes and crude attacks, not a security sandbox: the kernel runs
as the grading user.  For untrusted cohorts run this command inside a container or as an
unprivileged user.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "assignments" / "source"
RELEASE = ROOT / "assignments" / "release"
COURSE_ID = "llm_dataflow"
BIN = str(Path(sys.executable).parent)  # nbgrader calls `alembic`; kernels are started as `python`


def _env(home: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("JUPYTER_CONFIG_DIR", None)
    if home is not None:
        for d in ("home", "tmp"):
            (home / d).mkdir(parents=True, exist_ok=True)
        env.update(HOME=str(home / "home"), TMPDIR=str(home / "tmp"), JUPYTER_RUNTIME_DIR=str(home / "tmp"),
                   MPLCONFIGDIR=str(home / "tmp"), IPYTHONDIR=str(home / "home" / ".ipython"))
    return env


def assignments(source: Path = SOURCE) -> list[str]:
    """Names of the assignments under ``source`` (one folder each, holding ``<name>.ipynb``)."""
    return sorted(p.name for p in source.iterdir() if (p / f"{p.name}.ipynb").is_file())


def questions(notebook: Path) -> dict[str, float]:
    """Question → points of a source notebook (grade cells ``qN_public`` / ``qN_hidden`` summed)."""
    nb = json.loads(notebook.read_text())
    out: dict[str, float] = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            q = meta["grade_id"].split("_")[0]
            out[q] = out.get(q, 0) + float(meta.get("points", 0))
    return out


def _nbgrader(args: list[str], cwd: Path, env: dict, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run one nbgrader command as its own process group; kill the whole tree past ``timeout``."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        out, _ = proc.communicate()
        return subprocess.CompletedProcess(cmd, -9, out + "\n[grade.py] killed: submission time limit", None)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def _kill_tree(pid: int) -> None:
    """Kill ``pid`` and every process it started (the kernel may have left its process group)."""
    import psutil
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


SETUP_TIMEOUT = 120  # s for read-only cells (imports under load); answers and tests get --timeout

# nbclient's ``timeout_func`` gives each cell its own limit: a question (answer or test cell) gets
# the per-question limit, read-only set-up cells a generous one.  nbgrader's Execute interrupts a
# cell that overruns it and carries on with the next cell.
_TIMEOUT_CONFIG = """c = get_config()


def _cell_timeout(cell):
    meta = cell.get("metadata", {{}}).get("nbgrader", {{}})
    return {q} if (meta.get("solution") or meta.get("grade")) else {setup}


c.Execute.timeout_func = _cell_timeout
c.Execute.interrupt_on_timeout = True
"""


def _config(course: Path, db: Path) -> list[str]:
    return [f"--CourseDirectory.root={course}", f"--CourseDirectory.db_url=sqlite:///{db}",
            f"--CourseDirectory.course_id={COURSE_ID}", "--log-level=WARN"]


def build_course(work: Path, names: list[str], source: Path = SOURCE) -> tuple[Path, Path]:
    """Create an nbgrader course in ``work`` (``course/`` + ``db/gradebook.db``) and generate the
    student versions of ``names``.  Returns (course root, gradebook path).

    Raises:
        RuntimeError: nbgrader failed (its output is in the message).
    """
    course, db = work / "course", work / "db" / "gradebook.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copytree(source / name, course / "source" / name, dirs_exist_ok=True)
    # One process generates every assignment (nbgrader's start-up costs seconds per process).
    r = subprocess.run([sys.executable, "-c", _GENERATE, str(course), str(db), COURSE_ID, *names], cwd=course,
                       env=_env(work), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    missing = [n for n in names if not (course / "release" / n / f"{n}.ipynb").is_file()]
    if r.returncode or missing:
        raise RuntimeError(f"nbgrader generate_assignment failed for {missing or names}:\n{r.stdout}")
    return course, db


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


def generate(names: list[str], out: Path = RELEASE, source: Path = SOURCE) -> list[Path]:
    """Write the student version of each assignment to ``out/<name>/<name>.ipynb``
    (solutions replaced by ``raise NotImplementedError()``, hidden tests removed, outputs cleared)."""
    written = []
    with tempfile.TemporaryDirectory(prefix="ldf-gen-") as tmp:
        course, _ = build_course(Path(tmp), names, source)
        for name in names:
            dst = out / name
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copy2(course / "release" / name / f"{name}.ipynb", dst / f"{name}.ipynb")
            written.append(dst / f"{name}.ipynb")
    return written


def find_submissions(folder: Path, known: list[str]) -> list[tuple[str, str, Path]]:
    """(student, assignment, notebook) for every ``<student>/<assignment>.ipynb`` or
    ``<student>/<assignment>/<assignment>.ipynb`` under ``folder`` whose assignment is known."""
    subs = []
    for student in sorted(p for p in folder.iterdir() if p.is_dir()):
        for name in known:
            for cand in (student / f"{name}.ipynb", student / name / f"{name}.ipynb"):
                if cand.is_file():
                    subs.append((student.name, name, cand))
                    break
    return subs


def _grade_ids(notebook: Path) -> set[str]:
    """grade_ids of the cells in a notebook."""
    nb = json.loads(notebook.read_text())
    return {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb["cells"]} - {None}


def _cell_errors(notebook: Path) -> dict[str, str]:
    """grade_id → first error name of that cell in an autograded notebook."""
    nb = json.loads(notebook.read_text())
    errs = {}
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        names = [o.get("ename", "error") for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if gid and names:
            # an interrupted cell shows KeyboardInterrupt, then nbgrader's CellTimeoutError
            errs[gid] = "timeout" if "CellTimeoutError" in names else names[0]
    return errs


def grade_one(template: tuple[Path, Path], student: str, name: str, notebook: Path, timeout: int,
              submission_timeout: int | None) -> list[dict]:
    """Grade one submitted notebook in a temporary copy of the course; never raises.

    Returns one row per question: student, assignment, question, score, max_score, status.
    """
    course_t, db_t = template
    qs = questions(course_t / "source" / name / f"{name}.ipynb")
    rows = {q: dict(student=student, assignment=name, question=q, score=0.0, max_score=pts, status="")
            for q, pts in qs.items()}
    with tempfile.TemporaryDirectory(prefix="ldf-grade-") as tmp:
        tmp = Path(tmp)
        try:
            course, db = tmp / "work" / "course", tmp / "db" / "gradebook.db"
            shutil.copytree(course_t / "source" / name, course / "source" / name)
            db.parent.mkdir(parents=True)
            shutil.copy2(db_t, db)
            sub = course / "submitted" / student / name
            sub.mkdir(parents=True)
            shutil.copyfile(notebook, sub / f"{name}.ipynb")  # a copy: the original is never written
            n_cells = len(json.loads((course / "source" / name / f"{name}.ipynb").read_text())["cells"])
            limit = submission_timeout or timeout * n_cells + 2 * SETUP_TIMEOUT
            (course / "nbgrader_config.py").write_text(_TIMEOUT_CONFIG.format(q=timeout, setup=max(timeout, SETUP_TIMEOUT)))
            r = _nbgrader(["autograde", name, "--student", student, "--force", *_config(course, db)],
                          course, _env(tmp / "work"), timeout=limit)
            graded = course / "autograded" / student / name / f"{name}.ipynb"
            scores = _read_scores(db, name, student)
            if os.environ.get("LDF_GRADE_DEBUG"):
                print(r.stdout)
            if r.returncode == -9:
                status = f"grader: killed at the submission time limit ({limit} s)"
            elif r.returncode or scores is None:
                status = "grader: failed: " + _why(r.stdout)
            else:
                status = ""
            if status or scores is None:
                for row in rows.values():
                    row.update(score=0.0, status=status or "grader: no grades")
                return list(rows.values())
            errs = _cell_errors(graded) if graded.is_file() else {}
            present = _grade_ids(graded) if graded.is_file() else set()
            for gid in scores:
                if gid not in present:  # nbgrader scores a deleted test cell zero
                    errs.setdefault(gid, "test cell deleted")
            for gid, (score, _mx) in scores.items():
                q = gid.split("_")[0]
                rows[q]["score"] += score
            for q, row in rows.items():
                ids = [q] + sorted((g for g in scores if g.split("_")[0] == q), key=lambda g: (not g.endswith("_public"), g))
                first = next((errs[g] for g in ids if g in errs), None)
                row["status"] = "ok" if row["score"] == row["max_score"] and first is None else (first or "failed")
        except Exception as exc:  # the grader keeps going whatever one submission does
            for row in rows.values():
                row.update(score=0.0, status=f"grader: {type(exc).__name__}: {exc}"[:160])
    return list(rows.values())


def _why(log: str) -> str:
    """One line saying why nbgrader could not grade a submission."""
    if "Timeout waiting for execute reply" in log:
        return "a cell overran its time limit and did not stop when interrupted"
    if "DeadKernelError" in log or "Kernel died" in log:
        return "the kernel died (the notebook exited or crashed the interpreter)"
    if "FileNotFoundError" in log:
        return "the notebook deleted files the grader needs"
    if "Missing grade cell" in log or "missing" in log.lower() and "cell" in log.lower():
        return "the notebook lost cells of the assignment (delete/re-create cells?)"
    errs = [ln.strip() for ln in log.splitlines() if "Error" in ln and "[AutogradeApp" not in ln]
    return (errs[-1] if errs else "nbgrader gave no grades")[:150]


def _read_scores(db: Path, name: str, student: str) -> dict[str, tuple[float, float]] | None:
    """grade_id → (score, max_score) from a gradebook, or None when it holds no grades."""
    if not db.is_file():
        return None
    try:
        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{db}") as gb:
            sub = gb.find_submission_notebook(name, name, student)
            out = {g.name: (float(g.score), float(g.max_score)) for g in sub.grades}
    except Exception:
        return None
    return out or None


def grade(folder: Path, out_csv: Path | None, names: list[str] | None = None, timeout: int = 60,
          submission_timeout: int | None = None, jobs: int = 1, source: Path = SOURCE,
          log=print, template: tuple[Path, Path] | None = None) -> list[dict]:
    """Grade every submission under ``folder``; write ``out_csv`` (one row per student, assignment
    and question) and return the rows.  Never stops on a bad submission.

    ``timeout`` is the limit in seconds for each answer or test cell; ``jobs`` submissions are
    graded at once; ``template`` (from :func:`build_course`) skips generating the course again.
    """
    known = names or assignments(source)
    subs = find_submissions(folder, known)
    if not subs:
        raise SystemExit(f"no submissions found under {folder} (expected <student>/<assignment>.ipynb "
                         f"with assignment one of {', '.join(known)})")
    needed = sorted({a for _, a, _ in subs})
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ldf-course-") as tmp:
        if template is None:
            template = build_course(Path(tmp), needed, source)

        def work(item):
            student, name, nb = item
            t0 = time.perf_counter()
            res = grade_one(template, student, name, nb, timeout, submission_timeout)
            got, mx = sum(r["score"] for r in res), sum(r["max_score"] for r in res)
            bad = sorted({r["status"] for r in res if r["status"] != "ok"})
            log(f"{student:>16s} {name:<6s} {got:5.1f} / {mx:4.1f}  {time.perf_counter() - t0:5.1f} s"
                + (f"  [{'; '.join(bad)}]" if bad else ""))
            return res

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for res in pool.map(work, subs):
                rows.extend(res)
    if out_csv is not None:
        out_csv.parent.mkdir(parents=True, exist_ok=True)
        with open(out_csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["student", "assignment", "question", "score", "max_score", "status"])
            w.writeheader()
            w.writerows(rows)
    return rows


def selfcheck(names: list[str], timeout: int = 60, jobs: int = 1, source: Path = SOURCE) -> bool:
    """Grade every solution notebook (must score full marks) and every freshly generated student
    notebook, unmodified (must score zero).  Returns True when both hold."""
    with tempfile.TemporaryDirectory(prefix="ldf-self-") as tmp:
        tmp = Path(tmp)
        template = build_course(tmp / "course", names, source)
        for name in names:
            release = template[0] / "release" / name / f"{name}.ipynb"
            for who, src in (("solution", source / name / f"{name}.ipynb"), ("student", release)):
                (tmp / "subs" / who).mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tmp / "subs" / who / f"{name}.ipynb")
        rows = grade(tmp / "subs", None, names, timeout=timeout, jobs=jobs, source=source, template=template)
    ok = True
    for name in names:
        for who, want in (("solution", "full"), ("student", "zero")):
            rs = [r for r in rows if r["student"] == who and r["assignment"] == name]
            got, mx = sum(r["score"] for r in rs), sum(r["max_score"] for r in rs)
            good = (got == mx) if want == "full" else (got == 0)
            ok &= good
            if not good:
                print(f"FAIL {name} {who}: {got}/{mx} (wanted {want})")
    print("selfcheck:", "all solutions full marks, all student versions zero" if ok else "FAILED")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write student versions to assignments/release/")
    g.add_argument("names", nargs="*", help="assignments (default: all)")
    g.add_argument("--out", type=Path, default=RELEASE)
    r = sub.add_parser("grade", help="grade a folder of submissions into a CSV")
    r.add_argument("folder", type=Path)
    r.add_argument("-o", "--out", type=Path, default=Path("scores.csv"))
    r.add_argument("--assignment", action="append", help="only these assignments (repeatable)")
    r.add_argument("--timeout", type=int, default=60, help="seconds per cell (per question); default 60")
    r.add_argument("--submission-timeout", type=int, default=None,
                   help="seconds per notebook; default timeout × cells + 240")
    r.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded at once; default 1")
    s = sub.add_parser("selfcheck", help="solutions score full marks, student versions zero")
    s.add_argument("names", nargs="*")
    s.add_argument("-j", "--jobs", type=int, default=1)
    for p in (g, r, s):
        p.add_argument("--source", type=Path, default=SOURCE, help="folder of source notebooks")
    a = ap.parse_args(argv)
    if a.cmd == "generate":
        for p in generate(a.names or assignments(a.source), a.out, a.source):
            print("wrote", p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
        return 0
    if a.cmd == "grade":
        rows = grade(a.folder, a.out, a.assignment, a.timeout, a.submission_timeout, a.jobs, a.source)
        students = sorted({r["student"] for r in rows})
        print(f"wrote {a.out}: {len(rows)} rows, {len(students)} students")
        return 0
    return 0 if selfcheck(a.names or assignments(a.source), jobs=a.jobs, source=a.source) else 1


if __name__ == "__main__":
    sys.exit(main())
