"""``tools/grade.py``: generate an assignment's notebooks (the book's version or a class's own),
grade a folder of submissions, check the keys, and export scores and autograders.

    python tools/grade.py generate [--seed N] [--out DIR] [chNN ...]
    python tools/grade.py grade SUBMISSIONS [--seed N] -o scores.csv [--feedback DIR] [-j 2]
    python tools/grade.py selfcheck [--seed N] [-j 2] [chNN ...]
    python tools/grade.py export scores.csv --canvas canvas.csv --moodle moodle.csv
    python tools/grade.py gradescope chNN [--seed N] -o chNN-autograder.zip

``SUBMISSIONS`` holds one folder per student with the notebooks they returned, named like the
assignment (``alice/ch06.ipynb``, or nbgrader's ``alice/ch06/ch06.ipynb``).
"""
from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import engine, export, feedback, notebooks, spec

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = ROOT / "assignments"
SOURCE = ASSIGNMENTS / "source"
RELEASE = ASSIGNMENTS / "release"
CSV_FIELDS = ["student", "assignment", "question", "score", "max_score", "public", "hidden", "status", "message",
              "tampering", "notes"]


def generate(names: list[str], out: Path | None = None, source: Path = SOURCE, seed: int | None = None) -> list[Path]:
    """Write the instructor's source notebook and the student version of each assignment:
    ``out/source/chNN/chNN.ipynb`` and ``out/release/chNN/chNN.ipynb`` (``out`` defaults to
    ``assignments/`` for the book's version, ``class-<seed>/`` for a class's).  A class's folder
    also gets ``variant.json`` (its seed: ``grade --seed`` grades against it).

    Raises:
        RuntimeError: nbgrader failed to make a student version.
    """
    out = Path(out) if out is not None else (ASSIGNMENTS if seed is None else Path(f"class-{seed}"))
    written, sources = [], {}
    for name in names:
        a = spec.load(source, name, seed)
        path = out / "source" / name / f"{name}.ipynb"
        notebooks.write_json(path, notebooks.source_notebook(a))
        written.append(path)
        sources[name] = path
    written += list(notebooks.nbgrader_release(sources, out / "release").values())
    if seed is not None:
        (out / "variant.json").write_text(json.dumps({"seed": seed, "assignments": names}, indent=1) + "\n")
        written.append(out / "variant.json")
    return written


def find_submissions(folder: Path, known: list[str]) -> list[tuple[str, str, Path]]:
    """(student, assignment, notebook) for every ``<student>/<assignment>.ipynb`` or
    ``<student>/<assignment>/<assignment>.ipynb`` under ``folder`` whose assignment is known."""
    subs = []
    for student in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        for name in known:
            for cand in (student / f"{name}.ipynb", student / name / f"{name}.ipynb"):
                if cand.is_file():
                    subs.append((student.name, name, cand))
                    break
    return subs


def write_csv(results: list, path: Path) -> None:
    """The grader's CSV: one row per student, assignment and question (:data:`CSV_FIELDS`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in results:
            w.writerows(r.rows())


def grade(folder: Path, names: list[str] | None = None, source: Path = SOURCE, seed: int | None = None,
          timeout: float = 60.0, jobs: int = 1, feedback_dir: Path | None = None, log=print,
          kernel_user: str | None = None) -> list:
    """Grade every submission under ``folder`` (never stops on a bad one) and return one
    :class:`~grading.engine.SubmissionResult` per submission, in the order found.
    ``kernel_user``: run the students' kernels as that unprivileged account (as root)."""
    known = names or spec.assignment_names(source)
    subs = find_submissions(folder, known)
    if not subs:
        raise SystemExit(f"no submissions found under {folder} (expected <student>/<assignment>.ipynb with "
                         f"assignment one of {', '.join(known)})")
    specs = {n: spec.load(source, n, seed) for n in sorted({a for _, a, _ in subs})}

    def work(item):
        student, name, nb = item
        r = engine.grade_submission(specs[name], nb, student, timeout=timeout, kernel_user=kernel_user)
        bad = sorted({q.status for q in r.questions if q.status != "ok"})
        log(f"{student:>16s} {name:<6s} {r.score:5.1f} / {r.max_score:4.1f}  {r.seconds:5.1f} s"
            + (f"  [{'; '.join(bad)}]" if bad else ""))
        if feedback_dir is not None:
            feedback.write(r, specs[name], Path(feedback_dir) / student / f"{name}.html")
        return r

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(work, subs))


def filled_notebook(a: spec.Assignment, answers: dict[str, str] | None = None) -> dict:
    """The student version of ``a`` with its answer cells filled: the key's answers, or
    ``answers`` (``qid → code``) where given (a test's alternative or wrong answers)."""
    nb = notebooks.student_notebook(notebooks.Restored(
        [notebooks.Graded(c.kind, c.qid, c.text, c) for c in notebooks.cells(a)], {}, {}))
    byid = {c.id: c for c in notebooks.cells(a)}
    for cell in nb["cells"]:
        c = byid.get(cell.get("id"))
        if c is not None and c.kind == "answer":
            code = (answers or {}).get(c.qid)
            code = spec.solution_code(c.key) if code is None else code
            cell["source"] = notebooks._lines(code)
    # the student version's nbgrader metadata, so the notebook looks as a student returns it
    for cell in nb["cells"]:
        c = byid.get(cell.get("id"))
        if c is not None:
            cell["metadata"] = {"nbgrader": notebooks._nbgrader_meta(c)}
    return nb


def selfcheck(names: list[str], source: Path = SOURCE, seed: int | None = None, jobs: int = 1,
              timeout: float = 60.0) -> bool:
    """Grade each assignment's key (must score full marks) and its unanswered student version
    (must score zero).  Returns True when both hold for every assignment."""
    with tempfile.TemporaryDirectory(prefix="ldf-self-") as tmp:
        tmp = Path(tmp)
        for name in names:
            a = spec.load(source, name, seed)
            notebooks.write_json(tmp / "key" / f"{name}.ipynb", filled_notebook(a))
            empty = {q.id: spec.student_code(q.answer) for q in a.questions}
            notebooks.write_json(tmp / "student" / f"{name}.ipynb", filled_notebook(a, empty))
        results = grade(tmp, names, source, seed, timeout=timeout, jobs=jobs)
    ok = True
    for r in results:
        want = r.max_score if r.student == "key" else 0.0
        if r.score != want:
            ok = False
            print(f"FAIL {r.assignment} {r.student}: {r.score:g}/{r.max_score:g} (wanted {want:g})")
            for q in r.questions:
                if q.message:
                    print(f"   {q.qid}: {q.message}")
    print("selfcheck:", "every key full marks, every unanswered version zero" if ok else "FAILED")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the source notebooks and student versions")
    g.add_argument("names", nargs="*", help="assignments (default: all)")
    g.add_argument("--out", type=Path, default=None, help="default: assignments/ (or class-<seed>/ with --seed)")
    r = sub.add_parser("grade", help="grade a folder of submissions into a CSV")
    r.add_argument("folder", type=Path)
    r.add_argument("-o", "--out", type=Path, default=Path("scores.csv"))
    r.add_argument("--assignment", action="append", help="only these assignments (repeatable)")
    r.add_argument("--timeout", type=float, default=60.0, help="seconds per answer cell and per test; default 60")
    r.add_argument("--feedback", type=Path, default=None, help="write each student's HTML feedback under this folder")
    r.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded at once; default 1")
    r.add_argument("--kernel-user", default=None,
                   help="run students' kernels as this unprivileged account (the grader runs as root): "
                        "what it cannot read, such as a private --source of mode 700, the kernels cannot read")
    s = sub.add_parser("selfcheck", help="keys score full marks, unanswered versions zero")
    s.add_argument("names", nargs="*")
    s.add_argument("-j", "--jobs", type=int, default=1)
    e = sub.add_parser("export", help="turn the grader's CSV into gradebook CSVs (Canvas, Moodle)")
    e.add_argument("scores", type=Path)
    e.add_argument("--canvas", type=Path, help="write a CSV for Canvas's gradebook import")
    e.add_argument("--moodle", type=Path, help="write a CSV for Moodle's grade import")
    e.add_argument("--roster", type=Path, help="Canvas: the gradebook CSV exported from your course (names, IDs, sections)")
    gs = sub.add_parser("gradescope", help="write a Gradescope autograder (zip) for one assignment")
    gs.add_argument("name")
    gs.add_argument("-o", "--out", type=Path, default=None)
    gs.add_argument("--timeout", type=float, default=60.0)
    run = sub.add_parser("gradescope-run", help="(inside Gradescope's container) grade /autograder/submission")
    run.add_argument("name")
    run.add_argument("--submission", type=Path, required=True)
    run.add_argument("--results", type=Path, required=True)
    run.add_argument("--timeout", type=float, default=60.0)
    run.add_argument("--kernel-user", default=None)
    for p in (g, r, s, gs, run):
        p.add_argument("--source", type=Path, default=SOURCE, help="folder of assignment specs")
        p.add_argument("--seed", type=int, default=None, help="a class's own version (see generate --seed)")
    a = ap.parse_args(argv)
    if a.cmd == "generate":
        for p in generate(a.names or spec.assignment_names(a.source), a.out, a.source, a.seed):
            print("wrote", p.relative_to(ROOT) if p.resolve().is_relative_to(ROOT) else p)
        return 0
    if a.cmd == "grade":
        t0 = time.perf_counter()
        results = grade(a.folder, a.assignment, a.source, a.seed, a.timeout, a.jobs, a.feedback,
                        kernel_user=a.kernel_user)
        write_csv(results, a.out)
        print(f"wrote {a.out}: {sum(len(r.questions) for r in results)} rows, "
              f"{len({r.student for r in results})} students, {time.perf_counter() - t0:.0f} s")
        return 0
    if a.cmd == "selfcheck":
        return 0 if selfcheck(a.names or spec.assignment_names(a.source), a.source, a.seed, a.jobs) else 1
    if a.cmd == "export":
        if not (a.canvas or a.moodle):
            ap.error("export needs --canvas FILE and/or --moodle FILE")
        rows = export.read_scores(a.scores)
        if a.canvas:
            export.write_canvas(rows, a.canvas, a.roster)
            print("wrote", a.canvas)
        if a.moodle:
            export.write_moodle(rows, a.moodle)
            print("wrote", a.moodle)
        return 0
    if a.cmd == "gradescope":
        out = a.out or Path(f"{a.name}-autograder.zip")
        export.gradescope_zip(a.name, out, a.source, a.seed, a.timeout)
        print("wrote", out)
        return 0
    if a.cmd == "gradescope-run":
        return export.gradescope_run(a.name, a.submission, a.results, a.source, a.seed, a.timeout, a.kernel_user)
    return 2
