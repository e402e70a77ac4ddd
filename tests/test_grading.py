"""The grader end to end (``tools/grade.py``): real notebooks graded in real kernels.

* for **every** assignment: answers written differently from the keys (NumPy types, FP32, other
  algorithms) score full marks; common mistakes lose marks, each with a message naming it; the
  unanswered student version scores zero (three assignments here, all in test_grading_formats);
* the cheating probes, each with its expected outcome: a kernel that dies, a cell that ignores
  its interrupt, a function that loops, patched comparisons (``math.isclose``, ``numpy.testing``,
  ``numpy.isclose``), a search for the keys near the kernel, deleted and edited test cells,
  changed points, stripped metadata and lost cell ids;
* two classes' versions of one assignment: each key full marks in its own class, not in the other;
* the outputs: the CSV (messages and tampering), nbgrader's HTML feedback, a Gradescope autograder
  run in a stand-in ``/autograder``, ``nbgrader validate`` on the student versions, and the
  committed student versions equal to what nbgrader makes of the specs.

One graded run is shared by the assertions (module-scoped fixtures).  The file takes about 55 s
of CPU (kernels and nbgrader processes included; ``slow``); measured 3 min 23 s of wall time on a
2-core VM at a load average of 10–15.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from _grading import NAMES, RELEASE, SOURCE, check_results_json, cli, export, feedback, notebooks, spec

TIMEOUT = 20          # s per answer cell and per test here (the slowest legitimate one takes < 1 s)
#: assignments whose committed student version is graded here, unanswered (every assignment's is
#: checked without a kernel in tests/test_grading_formats.py; a kernel costs ~2 s of CPU)
UNANSWERED = ("ch00", "ch03", "ch06")
HOSTILE_TIMEOUT = 4   # s for the hostile notebooks (each hang costs this, plus 5 s of grace)


def _write(folder: Path, who: str, name: str, nb: dict) -> None:
    notebooks.write_json(folder / who / f"{name}.ipynb", nb)


def _by(results, student, name):
    return next(r for r in results if r.student == student and r.assignment == name)


# -------------------------------------------------------------------------------------------------
# Every assignment: alternatives, mistakes, the student version
# -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "subs"
    specs = {n: spec.load(SOURCE, n) for n in NAMES}
    for name, a in specs.items():
        _write(subs, "alternative", name, cli.filled_notebook(a, {q.id: q.alternative for q in a.questions}))
        _write(subs, "mistakes", name, cli.filled_notebook(a, {q.id: q.mistakes[0][0] for q in a.questions}))
        if name in UNANSWERED:
            (subs / "unanswered").mkdir(parents=True, exist_ok=True)
            shutil.copy2(RELEASE / name / f"{name}.ipynb", subs / "unanswered" / f"{name}.ipynb")
    t0 = time.perf_counter()
    results = cli.grade(subs, NAMES, timeout=TIMEOUT, jobs=2, log=lambda *_: None)
    elapsed = time.perf_counter() - t0
    cli.write_csv(results, tmp / "scores.csv")
    return dict(results=results, specs=specs, elapsed=elapsed, csv=tmp / "scores.csv", tmp=tmp)


@pytest.mark.parametrize("name", NAMES)
def test_alternative_correct_answers_score_full_marks(graded, name):
    r = _by(graded["results"], "alternative", name)
    assert r.score == r.max_score == graded["specs"][name].points, \
        {q.qid: q.message for q in r.questions if q.message}
    assert all(q.status == "ok" for q in r.questions) and not r.notes


@pytest.mark.parametrize("name", NAMES)
def test_each_mistake_loses_marks_with_a_message_naming_it(graded, name):
    r = _by(graded["results"], "mistakes", name)
    a = graded["specs"][name]
    for q in r.questions:
        fragment = a.question(q.qid).mistakes[0][1]
        assert q.score < q.max_score, (name, q.qid)
        assert fragment in q.message, (name, q.qid, fragment, q.message)
        assert q.message.startswith(("public tests:", "hidden tests:")), q.message


@pytest.mark.parametrize("name", UNANSWERED)
def test_the_unanswered_student_version_scores_zero(graded, name):
    r = _by(graded["results"], "unanswered", name)
    assert r.score == 0 and all(q.status == "not answered" for q in r.questions), \
        {q.qid: (q.status, q.message) for q in r.questions}
    assert not any(q.tampering for q in r.questions)


def test_grading_is_fast_enough_for_a_class(graded):
    """21 submissions on two workers; about 2–4 s of CPU each (a class of 100 in minutes)."""
    assert graded["elapsed"] < 240, f"21 submissions took {graded['elapsed']:.0f} s"


def test_csv_rows_messages_and_tampering(graded):
    rows = list(csv.DictReader(open(graded["csv"], encoding="utf-8")))
    assert list(rows[0]) == cli.CSV_FIELDS
    keys = [(r["student"], r["assignment"], r["question"]) for r in rows]
    assert len(keys) == len(set(keys)) == sum((2 + (n in UNANSWERED)) * len(a.questions)
                                              for n, a in graded["specs"].items())
    mist = [r for r in rows if r["student"] == "mistakes" and r["assignment"] == "ch06" and r["question"] == "q1"][0]
    assert mist["public"] == "failed" and "MHA count" in mist["message"]


def test_feedback_is_nbgrader_html_with_the_messages(graded):
    r = _by(graded["results"], "mistakes", "ch03")
    path = feedback.write(r, graded["specs"]["ch03"], graded["tmp"] / "feedback" / "mistakes" / "ch03.html")
    html = path.read_text(encoding="utf-8")
    assert f"(Score: {r.score:g}" in html or f"(Score: {r.score:.1f}" in html
    assert "Grade cell: <code>q1_public</code>" in html and "Student&#39;s answer" in html or "Student's answer" in html
    assert "inside the square" in html and "public tests of Q1 failed" in html
    assert "BEGIN HIDDEN TESTS" not in html and "expect_array(rmsnorm(_x" not in html   # no hidden test code


# -------------------------------------------------------------------------------------------------
# Cheating probes
# -------------------------------------------------------------------------------------------------
SEARCH = r'''
import os, pathlib, tempfile
found, places = [], [pathlib.Path.cwd(), pathlib.Path.home(), pathlib.Path(tempfile.gettempdir())]
places += list(pathlib.Path.cwd().parents)[:2]
places += [pathlib.Path(v) for k, v in os.environ.items() if os.sep in v and k != "PATH" and os.path.isdir(v)]
for place in places:
    for depth, pattern in enumerate(("*", "*/*", "*/*/*")):
        for f in place.glob(pattern):
            if f.is_file() and f.suffix in (".ipynb", ".py", ".json") and f.stat().st_size < 10**6:
                text = f.read_text(errors="ignore")
                if "BEGIN SOLUTION" in text or "def params(rng)" in text:
                    found.append(str(f))
print("cwd holds", sorted(os.listdir(".")), "; keys found:", found)
for f in found:                     # run every solution it finds
    exec(compile(open(f).read().replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), f, "exec"))
'''
PATCH = '''
import math, numpy as np, numpy.testing
math.isclose = lambda *a, **k: True
np.isclose = lambda a, b, **k: np.ones(np.broadcast(np.asarray(a), np.asarray(b)).shape, dtype=bool)
np.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
numpy.testing.assert_array_equal = lambda *a, **k: None
import llm_dataflow.checks as _c
for _n in ("expect_int", "expect_close", "expect_array", "expect_equal", "expect_raises"):
    setattr(_c, _n, lambda *a, **k: None)
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    private = tmp / "private-source"                         # an instructor's private copy of the specs
    shutil.copytree(SOURCE, private, ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    subs = tmp / "subs"
    a = spec.load(private, "ch06")
    key = {q.id: spec.solution_code(q.answer) for q in a.questions}
    mal = dict(key)
    mal["q1"] = "import os\nos._exit(1)\n"                                             # kills the kernel
    mal["q2"] = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"   # ignores interrupts
    mal["q3"] = key["q3"] + "\n" + PATCH                                               # right answer, patched comparisons
    mal["q4"] = "def paged_gather(pool, block_table, seq_len):\n    while True:\n        pass\n"   # loops when called
    _write(subs, "mallory", "ch06", cli.filled_notebook(a, mal))
    stubs = {q.id: f"{PATCH}\n" + "\n".join(f"def {n}(*a, **k):\n    return 0" for n in q.names) for q in a.questions}
    _write(subs, "patcher", "ch06", cli.filled_notebook(a, stubs))
    unanswered = {q.id: spec.student_code(q.answer) for q in a.questions}
    _write(subs, "reader", "ch06", cli.filled_notebook(a, dict(unanswered, q1=SEARCH)))
    nb = cli.filled_notebook(a)
    cells = []
    for c in nb["cells"]:
        gid = c["metadata"]["nbgrader"]["grade_id"]
        if gid.endswith("_hidden"):
            continue                                                   # every hidden placeholder deleted
        c = dict(c, metadata={})                                       # metadata stripped
        if gid == "q2_public":
            c["source"] = ["pass\n"]
            c["metadata"] = {"nbgrader": {"grade": True, "grade_id": "q2_public", "points": 50, "locked": True}}
        cells.append(c)
    _write(subs, "stripped", "ch06", dict(nb, cells=cells))
    nb = cli.filled_notebook(a)
    for c in nb["cells"]:
        c.pop("id")
        c["metadata"] = {}
    _write(subs, "noids", "ch06", nb)
    (subs / "do-not-delete.txt").write_text("sentinel")
    before = {p: p.read_bytes() for p in sorted(subs.rglob("*")) if p.is_file()}
    t0 = time.perf_counter()
    results = cli.grade(subs, ["ch06"], private, timeout=HOSTILE_TIMEOUT, jobs=2, log=lambda *_: None)
    return dict(results=results, elapsed=time.perf_counter() - t0, before=before, private=private, tmp=tmp,
                after={p: p.read_bytes() for p in sorted(subs.rglob("*")) if p.is_file()})


def test_a_dead_or_hung_kernel_costs_only_its_own_question(hostile):
    r = _by(hostile["results"], "mallory", "ch06")
    s = {q.qid: (q.score, q.status) for q in r.questions}
    assert s["q1"] == (0, "kernel died") and s["q2"] == (0, "timeout")
    assert s["q3"] == (3, "ok")                      # graded after two restarts; its patches changed nothing
    assert s["q4"] == (0, "timeout") and "paged_gather" in r.questions[3].message
    assert r.restarts == 2
    assert hostile["after"] == hostile["before"]     # the submitted files were only read


def test_patched_comparisons_earn_nothing(hostile):
    r = _by(hostile["results"], "patcher", "ch06")
    assert r.score == 0, {q.qid: q.message for q in r.questions}


def test_the_kernel_finds_no_key_near_it(hostile):
    r = _by(hostile["results"], "reader", "ch06")
    assert r.score == 0
    out = [o.get("text", "") for g, run in r.cells if g.kind == "answer" and g.qid == "q1" and run
           for o in run.outputs if o.get("output_type") == "stream"]
    assert "cwd holds [] ; keys found: []" in "".join(out), out


OPEN_KEY = r'''
try:
    text = open(KEY)
    print("read the key:", len(text.read()), "characters")
except PermissionError as exc:
    print("denied:", exc)
'''


def _nobody_can_run_python() -> bool:
    """Whether this machine lets the account ``nobody`` run this interpreter (root, a runuser,
    an interpreter outside root's home)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("runuser"):
        return False
    r = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "import ipykernel, numpy"],
                       capture_output=True, timeout=120)
    return r.returncode == 0


def test_a_kernel_run_as_another_account_cannot_read_the_keys(hostile):
    """A student who knows exactly where the instructor's private specs are: a kernel run as the
    grading user reads them (not protected: say so), one run as an unprivileged account
    (``--kernel-user``) is refused (a private --source of mode 700)."""
    private = hostile["private"]
    os.chmod(private, 0o700)
    a = spec.load(private, "ch06")
    unanswered = {q.id: spec.student_code(q.answer) for q in a.questions}
    subs = hostile["tmp"] / "subs-key"
    probe = f"KEY = {str(private / 'ch06' / 'ch06.py')!r}\n" + OPEN_KEY
    _write(subs, "reader", "ch06", cli.filled_notebook(a, dict(unanswered, q1=probe)))
    said = {}
    users = (None, "nobody") if _nobody_can_run_python() else (None,)
    for user in users:
        r = cli.grade(subs, ["ch06"], private, timeout=TIMEOUT, log=lambda *_: None, kernel_user=user)[0]
        said[user] = "".join(o.get("text", "") for g, run in r.cells if g.kind == "answer" and g.qid == "q1" and run
                             for o in run.outputs if o.get("output_type") == "stream")
        assert r.score == 0
    assert said[None].startswith("read the key:"), said
    if "nobody" not in users:
        pytest.skip("this machine's interpreter cannot be run by 'nobody' (not root, or it lives in root's home): "
                    "the --kernel-user half is untested here")
    assert said["nobody"].startswith("denied:"), said


def test_deleted_edited_and_stripped_test_cells_are_restored_and_reported(hostile):
    for who in ("stripped", "noids"):
        r = _by(hostile["results"], who, "ch06")
        assert r.score == r.max_score == 10, (who, {q.qid: q.message for q in r.questions})
    rows = _by(hostile["results"], "stripped", "ch06").rows()
    assert "points changed from 1 to 50 (ignored)" in rows[1]["tampering"] and "edited (restored)" in rows[1]["tampering"]
    assert all("q%d_hidden deleted (restored)" % (i + 1) in rows[i]["tampering"] for i in range(4))
    assert not any(r["tampering"] for r in _by(hostile["results"], "noids", "ch06").rows())


# -------------------------------------------------------------------------------------------------
# Two classes' versions
# -------------------------------------------------------------------------------------------------
def test_two_classes_versions_each_graded_right(tmp_path):
    """generate --seed writes each class its own notebooks; each class's key scores full marks in
    its own class and loses marks in the other's (their expected values differ)."""
    written = cli.generate(["ch00"], tmp_path / "class-11", SOURCE, seed=11)
    assert json.loads((tmp_path / "class-11" / "variant.json").read_text())["seed"] == 11
    rel11 = json.loads((tmp_path / "class-11" / "release" / "ch00" / "ch00.ipynb").read_text())
    assert "BEGIN SOLUTION" not in json.dumps(rel11) and any(p.name == "ch00.ipynb" for p in written)
    keys = {}
    for seed in (11, 12):
        a = spec.load(SOURCE, "ch00", seed)
        keys[seed] = a
        _write(tmp_path / "subs", f"key{seed}", "ch00", cli.filled_notebook(a))
    assert keys[11].params["model"] != keys[12].params["model"] or keys[11].params["gpu"] != keys[12].params["gpu"]
    for seed in (11, 12):
        res = cli.grade(tmp_path / "subs", ["ch00"], SOURCE, seed, timeout=TIMEOUT, jobs=2, log=lambda *_: None)
        own, other = _by(res, f"key{seed}", "ch00"), _by(res, f"key{23 - seed}", "ch00")
        assert own.score == own.max_score, {q.qid: q.message for q in own.questions}
        assert other.score < other.max_score


# -------------------------------------------------------------------------------------------------
# Gradescope, nbgrader
# -------------------------------------------------------------------------------------------------
def test_gradescope_autograder_runs_in_a_stand_in_container(tmp_path):
    """The zip's run_autograder, run as Gradescope runs it (working directory /autograder, the
    zip in /autograder/source, the upload in /autograder/submission), writes a valid results.json."""
    import tempfile
    root = Path(tempfile.mkdtemp(prefix="ldf-autograder-"))     # as /autograder: readable by the kernel's account
    os.chmod(root, 0o755)
    zpath = export.gradescope_zip("ch02", tmp_path / "ch02.zip", SOURCE, timeout=TIMEOUT)
    with zipfile.ZipFile(zpath) as z:
        z.extractall(root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    a = spec.load(SOURCE, "ch02")
    _write(root, "submission", "ch02", cli.filled_notebook(a, {"q1": a.question("q1").alternative,
                                                                 "q2": a.question("q2").mistakes[0][0]}))
    as_root = _nobody_can_run_python()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LDF_AUTOGRADER_ROOT": str(root),
           "LDF_AUTOGRADER_PYTHON": sys.executable, "HOME": str(tmp_path),
           "LDF_KERNEL_USER": "nobody" if as_root else ""}      # Gradescope's setup.sh makes ldf-student
    try:
        r = subprocess.run(["bash", str(root / "run_autograder")], cwd=root, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads((root / "results" / "results.json").read_text())
        if as_root:        # the spec (the keys) became root's only; the kernel ran as nobody
            assert (root / "source").stat().st_mode & 0o077 == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    check_results_json(res)
    assert res["score"] == a.points - a.question("q2").points
    failed = [t for t in res["tests"] if t["status"] == "failed"]
    assert [t["number"] for t in failed] == ["2.1", "2.2"] and "read once" in failed[0]["output"]


def _nbgrader(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_nbgrader_validate_on_the_student_version(tmp_path):
    """`nbgrader validate` (the README's command): a student version answered right passes; one
    with chapter 03's conceptual errors (ε outside the root, GQA ignored, the embedding counted
    as FLOPs, SiLU on the wrong branch, x read once) fails every public test cell."""
    a = spec.load(SOURCE, "ch03")
    rel = json.loads((RELEASE / "ch03" / "ch03.ipynb").read_text())
    for who, answers in (("right", {q.id: spec.solution_code(q.answer) for q in a.questions}),
                         ("wrong", {q.id: q.mistakes[0][0] for q in a.questions})):
        nb = json.loads(json.dumps(rel))
        for c in nb["cells"]:
            qid = c.get("id", "").removeprefix("ch03-")
            if qid in answers:
                c["source"] = answers[qid]
        (tmp_path / f"{who}.ipynb").write_text(json.dumps(nb))
    ok = _nbgrader("validate", "right.ipynb", cwd=tmp_path)
    assert "Success! Your notebook passes all the tests." in ok.stdout, ok.stdout + ok.stderr
    bad = _nbgrader("validate", "wrong.ipynb", cwd=tmp_path)
    assert f"VALIDATION FAILED ON {len(a.questions)} CELL(S)" in bad.stdout, bad.stdout    # every public test cell
    assert "rmsnorm(x, w, eps=0.5)" in bad.stdout and "layer_params(" in bad.stdout


def test_committed_student_versions_are_what_nbgrader_makes(tmp_path):
    """assignments/release/ is nbgrader's generate_assignment of assignments/source/."""
    out = notebooks.nbgrader_release({n: SOURCE / n / f"{n}.ipynb" for n in NAMES}, tmp_path)
    for name in NAMES:
        assert json.loads((RELEASE / name / f"{name}.ipynb").read_text()) == json.loads(out[name].read_text()), \
            f"assignments/release/{name} is stale: run python tools/grade.py generate"
