"""The graded-assignment machinery (``tools/grade.py``, nbgrader): solutions score full marks,
unmodified student notebooks score zero, a wrong answer loses exactly its question's points, bad
submissions are contained, and three submissions grade in under two minutes.

Grading starts real kernels, so this file grades only chapters 06 and 07 (about a minute on two
quiet cores).  The full run over every chapter is a separate command:
``python tools/grade.py selfcheck -j 2`` (or ``LDF_FULL_GRADING=1 pytest tests/test_grading.py -k full``).
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ldf_grade", ROOT / "tools" / "grade.py")
grade = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(grade)

CHAPTERS = ["ch00", "ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08"]
QUESTION_TIMEOUT = 5   # s per answer/test cell here (the slowest takes 0.06 s on 2 quiet cores; the hostile
#                       loop burns a core until it); set-up cells get grade.SETUP_TIMEOUT

# Deliberately wrong answers (chapter 06): the KV formula without GQA and an online-softmax merge
# that adds the partial sums without rescaling them to the common maximum.
KV_WITHOUT_GQA = '''def kv_cache_bytes(config, seq_len, batch=1, bytes_per_elem=2):
    h = config["num_attention_heads"]
    d = config.get("head_dim") or config["hidden_size"] // h
    if seq_len < 0:
        raise ValueError("seq_len")
    return 2 * config["num_hidden_layers"] * h * d * seq_len * batch * bytes_per_elem
'''
MERGE_WITHOUT_RESCALING = '''def merge_partials(m1, l1, o1, m2, l2, o2):
    l = l1 + l2
    return np.maximum(m1, m2), l, (l1[:, None] * o1 + l2[:, None] * o2) / l[:, None]
'''
# A hostile submission: deletes what it can reach, loops forever, raises — and answers Q2 right.
DESTRUCTIVE = '''import os, shutil
from pathlib import Path
shutil.rmtree(Path.home(), ignore_errors=True)
for _f in Path(".").iterdir():
    if _f.is_file():
        _f.unlink()
'''
LOOP = "while True:\n    pass\n"
RAISE = "raise RuntimeError('this submission raises')\n"


def _source(name: str) -> Path:
    return grade.SOURCE / name / f"{name}.ipynb"


def _with_answers(path: Path, answers: dict[str, str]) -> dict:
    """The notebook at ``path`` with the answer cells ``grade_id → source`` replaced."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = answers.pop(gid)
    assert not answers, f"no such cells: {sorted(answers)}"
    return nb


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _scores(rows, student, name):
    return {r["question"]: (r["score"], r["max_score"], r["status"]) for r in rows
            if r["student"] == student and r["assignment"] == name}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    template = grade.build_course(tmp / "course", ["ch06", "ch07"])
    release = template[0] / "release"
    first, second = tmp / "first", tmp / "second"
    for who, name, nb in [
        ("solution", "ch06", json.loads(_source("ch06").read_text())),
        ("student", "ch06", json.loads((release / "ch06" / "ch06.ipynb").read_text())),
        ("wrong", "ch06", _with_answers(_source("ch06"), {"q1": KV_WITHOUT_GQA, "q3": MERGE_WITHOUT_RESCALING})),
    ]:
        (first / who).mkdir(parents=True, exist_ok=True)
        (first / who / f"{name}.ipynb").write_text(json.dumps(nb))
    (second / "mallory").mkdir(parents=True)
    mal = _with_answers(_source("ch06"), {"q1": DESTRUCTIVE, "q3": LOOP, "q4": RAISE})
    (second / "mallory" / "ch06.ipynb").write_text(json.dumps(mal))
    (second / "solution").mkdir()
    shutil.copy2(_source("ch07"), second / "solution" / "ch07.ipynb")
    (second / "do-not-delete.txt").write_text("sentinel")
    before = {"second": _digest(second), "source": _digest(grade.SOURCE)}

    t0 = time.perf_counter()
    rows1 = grade.grade(first, tmp / "scores.csv", ["ch06", "ch07"], timeout=QUESTION_TIMEOUT, jobs=2,
                        template=template, log=lambda *_: None)
    elapsed = time.perf_counter() - t0
    rows2 = grade.grade(second, None, ["ch06", "ch07"], timeout=QUESTION_TIMEOUT, jobs=2,
                        template=template, log=lambda *_: None)
    after = {"second": _digest(second), "source": _digest(grade.SOURCE)}
    return dict(rows=rows1 + rows2, elapsed=elapsed, csv=tmp / "scores.csv", before=before, after=after,
                release=release)


def test_solution_scores_full_marks(graded):
    for name in ("ch06", "ch07"):
        s = _scores(graded["rows"], "solution", name)
        assert s and all(score == mx and st == "ok" for score, mx, st in s.values()), (name, s)


def test_student_version_unmodified_scores_zero(graded):
    s = _scores(graded["rows"], "student", "ch06")
    assert set(s) == {"q1", "q2", "q3", "q4"}
    assert all(score == 0 for score, _, _ in s.values()), s
    assert all(st == "NotImplementedError" for _, _, st in s.values()), s


def test_wrong_answers_lose_exactly_their_points(graded):
    s = _scores(graded["rows"], "wrong", "ch06")
    points = grade.questions(_source("ch06"))
    assert points == {"q1": 3, "q2": 2, "q3": 3, "q4": 2}
    # KV without GQA loses Q1 (3 points); merging without rescaling loses Q3 (3 points); nothing else.
    assert {q: v[0] for q, v in s.items()} == {"q1": 0, "q2": 2, "q3": 0, "q4": 2}
    assert s["q1"][2] == s["q3"][2] == "AssertionError"


def test_three_submissions_grade_in_under_two_minutes(graded):
    assert graded["elapsed"] < 120, f"grading 3 submissions took {graded['elapsed']:.0f} s"


def test_hostile_submission_is_contained(graded):
    s = _scores(graded["rows"], "mallory", "ch06")
    assert s["q3"][:1] == (0,) and s["q3"][2] == "timeout"          # the loop hit the time limit
    assert s["q4"][:1] == (0,) and s["q4"][2] == "RuntimeError"     # the raise is reported
    assert s["q2"] == (2, 2, "ok")                                  # later cells still ran
    assert s["q1"][0] == 0
    # Nothing outside its temporary copy was touched: the submissions folder (with the
    # submitted notebook itself) and the instructor's sources are byte-identical.
    assert graded["after"] == graded["before"]
    # and the grader carried on with the next submission
    assert _scores(graded["rows"], "solution", "ch07")


def test_csv_has_one_row_per_student_assignment_question(graded):
    with open(graded["csv"]) as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["student", "assignment", "question", "score", "max_score", "status"]
    keys = [(r["student"], r["assignment"], r["question"]) for r in rows]
    assert len(keys) == len(set(keys)) == 3 * 4
    assert sum(float(r["score"]) for r in rows if r["student"] == "solution") == 10


def test_committed_student_versions_match_generated(graded):
    """assignments/release/ is what ``tools/grade.py generate`` writes (checked for 06 and 07)."""
    for name in ("ch06", "ch07"):
        committed = json.loads((grade.RELEASE / name / f"{name}.ipynb").read_text())
        fresh = json.loads((graded["release"] / name / f"{name}.ipynb").read_text())
        assert committed == fresh, f"assignments/release/{name} is stale: run python tools/grade.py generate"


@pytest.mark.parametrize("name", CHAPTERS)
def test_assignment_structure(name):
    """Every chapter has a source with solutions and hidden tests, 3–5 questions each with a public
    and a hidden test cell, and a committed student version with neither solutions nor hidden tests."""
    src = _source(name).read_text()
    rel = (grade.RELEASE / name / f"{name}.ipynb").read_text()
    qs = grade.questions(_source(name))
    assert 3 <= len(qs) <= 5, qs
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in json.loads(src)["cells"]]
    for q in qs:
        assert {q, f"{q}_public", f"{q}_hidden"} <= set(ids), q
    assert "### BEGIN SOLUTION" in src and "### BEGIN HIDDEN TESTS" in src
    assert "BEGIN SOLUTION" not in rel and "HIDDEN TESTS" not in rel and "raise NotImplementedError()" in rel


@pytest.mark.skipif(not os.environ.get("LDF_FULL_GRADING"), reason="slow: set LDF_FULL_GRADING=1 "
                    "(or run python tools/grade.py selfcheck)")
def test_full_selfcheck_every_chapter():
    assert grade.selfcheck(CHAPTERS, jobs=2)
