"""The grader's parts that need no kernel (seconds): the assignments' tests run directly on the
keys, on alternative correct answers and on common mistakes, for the book's version and two
classes' versions; the checks' tolerance of types and FP32; the data that crosses to and from a
kernel; restoring a submission's cells; and the formats instructors import — Canvas's and
Moodle's gradebook CSVs and Gradescope's autograder, each tested against the rules its published
specification or importer states (cited at each test).

The kernel path (grading real notebooks, hostile ones included) is ``tests/test_grading.py``.
"""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile

import numpy as np
import pytest

import llm_dataflow as ldf
from llm_dataflow import checks

from _grading import NAMES, RELEASE, SOURCE, check_results_json, direct, engine, export, notebooks, spec, wire

VERSIONS = [None, 1, 2]          # the book's version and two classes' (generate --seed 1 / 2)


# -------------------------------------------------------------------------------------------------
# Every question of every version: the key, an alternative correct answer, common mistakes
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", VERSIONS, ids=lambda s: "book" if s is None else f"seed{s}")
@pytest.mark.parametrize("name", NAMES)
def test_keys_alternatives_and_mistakes(name, seed):
    """The key and an answer written differently (NumPy types, FP32, another algorithm) pass the
    public and hidden tests of every question; every listed mistake fails at least one of them,
    and in the book's version its message names the mistake."""
    a = spec.load(SOURCE, name, seed)
    for who, answers in (("key", None), ("alternative", {q.id: q.alternative for q in a.questions})):
        res = direct(a, answers)
        bad = {(q, k): m for q, r in res.items() for k, (ok, m) in r.items() if not ok}
        assert not bad, f"{name} ({seed}) {who}: {bad}"
    for q in a.questions:
        assert q.alternative.strip() and q.mistakes, f"{name} {q.id}: needs an alternative answer and mistakes"
        assert q.alternative.strip() != spec.solution_code(q.answer).strip()
        for code, fragment in q.mistakes:
            r = direct(a, {q.id: code})[q.id]
            msgs = [m for ok, m in r.values() if not ok]
            assert msgs, f"{name} ({seed}) {q.id}: the mistake scores full marks:\n{code}"
            if seed is None:
                assert any(fragment in m for m in msgs), (name, q.id, fragment, msgs)


@pytest.mark.parametrize("name", NAMES)
def test_the_unanswered_student_version_fails_every_test(name):
    """The student version's answer cells (``raise NotImplementedError()``) pass no test."""
    a = spec.load(SOURCE, name)
    res = direct(a, {q.id: spec.student_code(q.answer) for q in a.questions})
    passed = {(q, k) for q, r in res.items() for k, (ok, _) in r.items() if ok}
    assert not passed, passed


def test_every_question_says_what_it_returns():
    for name in NAMES:
        a = spec.load(SOURCE, name)
        assert 3 <= len(a.questions) <= 5, name
        for c in notebooks.cells(a):
            if c.kind == "markdown" and c.qid:
                q = a.question(c.qid)
                assert q.returns.strip() and f"**Returns:** {q.returns.strip()}" in c.text, (name, q.id)


def test_two_versions_differ_in_their_answers():
    """A class's version asks other models, GPUs and lengths: its expected values differ from
    the book's, so a key of values published for one class loses marks in another (a function
    written right passes everywhere, as it should: its hidden inputs differ, not its job)."""
    for name in NAMES:
        book, other = spec.load(SOURCE, name), spec.load(SOURCE, name, 1)
        assert book.params != other.params, name
        assert [q.hidden for q in book.questions] != [q.hidden for q in other.questions], name
    for name in ("ch00", "ch01", "ch03", "ch04", "ch05", "ch07", "ch08"):     # those with value questions
        book = spec.load(SOURCE, name)
        book_key = {q.id: spec.solution_code(q.answer) for q in book.questions}
        lost = {}
        for seed in (1, 2, 3):       # (a class may draw the book's choices for every value by chance)
            res = direct(spec.load(SOURCE, name, seed), book_key)
            lost[seed] = [q for q, r in res.items() if not all(ok for ok, _ in r.values())]
        assert sum(bool(v) for v in lost.values()) >= 2, f"{name}: the book's key keeps its marks: {lost}"


def test_expected_values_follow_the_package():
    """Closed forms the tests use where the package's own function needs torch (the grader and
    Gradescope's container run without it) equal the package's numbers."""
    c = ldf.model_config("Llama-3-8B")
    for n in (1, 2048):
        ops = ldf.analytic_op_costs(c, 1, n, "prefill", elem_bytes=2)
        mlp = sum(ops[k][1] for k in ("gate_proj", "up_proj", "silu*mul", "down_proj"))
        D, F = c.d_model, c.d_ff
        assert mlp == (3 * D * F + 3 * n * D + 6 * n * F) * 2           # ch03 q5, unfused
    t = ldf.gemm_traffic(37, 29, 53, 8, 16, 10, "bf16")
    assert t.x_loads + t.w_loads == -(-29 // 16) * 37 * 53 + -(-37 // 8) * 53 * 29      # ch04 q1/q2
    ds = ldf.model_config("DeepSeek-V3")
    assert ldf.kv_bytes_per_token(ds) == ds.n_layers * (ds.kv_lora_rank + ds.qk_rope_head_dim) * 2   # ch06 q2


# -------------------------------------------------------------------------------------------------
# The checks: any correct value, whatever carries it
# -------------------------------------------------------------------------------------------------
def test_checks_accept_any_correct_type_and_fp32():
    checks.expect_int(np.int64(296), 296, "b")
    checks.expect_int(np.uint8(7), 7, "b")
    checks.expect_close(np.float32(1 / 3), 1 / 3, "x", rel=1e-6)
    checks.expect_close(np.float64(0.1 + 0.2), 0.3, "x")
    checks.expect_array(np.float32([1 / 3, 2.0]), [1 / 3, 2.0], "a", rtol=1e-6)
    checks.expect_array([[1, 2]], np.array([[1.0, 2.0]]), "a")
    checks.expect_equal(np.bool_(True), True, "flag")
    checks.expect_raises(ValueError, int, "x", what="int('x')")


def test_checks_reject_wrong_types_with_a_reason():
    with pytest.raises(AssertionError, match="an integer.*int\\(\\.\\.\\.\\)"):
        checks.expect_int(np.float64(296.0), 296, "critical_batch")
    with pytest.raises(AssertionError, match="expected an integer"):
        checks.expect_int(True, 1, "n")
    with pytest.raises(AssertionError, match="expected a number"):
        checks.expect_close("1.0", 1.0, "x")
    with pytest.raises(AssertionError, match="dtype float16"):
        checks.expect_array(np.zeros(2), np.zeros(2), "a", dtype=np.float16)
    with pytest.raises(AssertionError, match="shape"):
        checks.expect_array(np.zeros(3), np.zeros(2), "a")
    with pytest.raises(AssertionError, match="inf or NaN"):
        checks.expect_array([np.nan, 1.0], [0.5, 1.0], "o")
    with pytest.raises(AssertionError, match="it returned"):
        checks.expect_raises(ValueError, abs, -1, what="abs(-1)")


def test_checks_name_common_mistakes():
    for got, want, words in ((13.2147 / 1.073741824, 13.2147, "GiB where GB"), (2000.0, 1000.0, "twice"),
                             (0.004, 4.0, "1000× too small"), (8e9, 1e9, "bits")):
        with pytest.raises(AssertionError, match=words):
            checks.expect_close(got, want, "x", rel=1e-3)
    with pytest.raises(AssertionError, match="MHA"):
        checks.expect_int(16, 4, "kv", hints={16: "that is MHA"})
    with pytest.raises(AssertionError, match="LayerNorm"):
        checks.expect_array([1.0, 2.0], [0.0, 0.0], "y", hints=[([1.0, 2.0], "that is LayerNorm")])


# -------------------------------------------------------------------------------------------------
# What crosses between grader and kernel: data only
# -------------------------------------------------------------------------------------------------
def test_wire_round_trips_data_and_normalises_numpy_scalars():
    values = [None, True, 3, 2**80, -1.5, float("inf"), "s", b"\x00\x01", [1, [2]], (1, 2), {"a": 1, 2: (3,)},
              {1, 2}, np.int64(7), np.float32(0.5), np.bool_(False), 1 + 2j,
              np.arange(6, dtype=np.int16).reshape(2, 3), np.zeros((0, 4), np.float32), np.array([1.5], ">f8")]
    out = wire.decode(json.loads(json.dumps(wire.encode(values))))
    assert out[:12] == values[:12]
    assert type(out[12]) is int and out[12] == 7 and type(out[13]) is float and out[14] is False
    assert out[15] == 1 + 2j
    for got, want in zip(out[16:], values[16:]):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)


def test_wire_sends_no_code_and_refuses_what_is_not_data():
    class Sneaky:
        def __reduce__(self):        # a pickle would run this; the wire never unpickles
            raise AssertionError("unpickled")
    out = wire.decode(wire.encode([Sneaky(), len, np.array([Sneaky()], dtype=object)]))
    assert isinstance(out[0], wire.Opaque) and out[0] != out[0] and isinstance(out[1], wire.Opaque)
    assert isinstance(out[2][0], wire.Opaque)
    for bad in ({"$nd": ["|O", [1], ""]}, {"$nd": ["<f8", [2], "AAAA"]}, {"$exec": "x"}, {"a": 1, "b": 2}):
        with pytest.raises(ValueError):
            wire.decode(bad)


def test_student_exceptions_keep_their_builtin_class():
    exc = engine.student_exception({"type": "ValueError", "mro": ["ValueError", "Exception"], "message": "m"}, "f()")
    assert isinstance(exc, ValueError) and isinstance(exc, engine.StudentError)
    custom = engine.student_exception({"type": "MyError", "mro": ["MyError", "KeyError", "LookupError"], "message": ""}, "")
    assert isinstance(custom, KeyError)
    nie = engine.student_exception({"type": "NotImplementedError", "mro": ["NotImplementedError"], "message": ""}, "f(1)")
    assert engine._failure(nie, "", engine._Link(None)).startswith("not answered")


# -------------------------------------------------------------------------------------------------
# Restoring a submission's cells
# -------------------------------------------------------------------------------------------------
def _release(name="ch06"):
    return json.loads((RELEASE / name / f"{name}.ipynb").read_text())


def test_committed_notebooks_are_rendered_from_the_specs():
    """assignments/source is the spec rendered (tools/grade.py generate); the student version's
    locked cells are exactly the cells the grader restores."""
    for name in NAMES:
        a = spec.load(SOURCE, name)
        assert json.loads((SOURCE / name / f"{name}.ipynb").read_text()) == notebooks.source_notebook(a), \
            f"assignments/source/{name} is stale: run python tools/grade.py generate"
        rel = {c["id"]: "".join(c["source"]) for c in _release(name)["cells"]}
        for c in notebooks.cells(a):
            assert rel[c.id].strip() == c.text.strip(), (name, c.id)
        text = json.dumps(_release(name))
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and "expect_" in text
        for q in a.questions:                         # no hidden test reaches the student version
            assert q.hidden.strip().splitlines()[-1] not in text, (name, q.id)


def test_restore_puts_back_deleted_edited_and_stripped_cells():
    a = spec.load(SOURCE, "ch06")
    nb = _release()
    cells = []
    for c in nb["cells"]:
        gid = c["metadata"].get("nbgrader", {}).get("grade_id", "")
        if gid == "q1_hidden":
            continue                                               # deleted
        if gid == "q2_public":
            c = dict(c, source=["assert True\n"])                   # edited, points raised
            c["metadata"] = {"nbgrader": dict(c["metadata"]["nbgrader"], points=50)}
        elif gid == "q3_public":
            c = dict(c, metadata={})                                # metadata stripped by another editor
        elif gid == "q4":
            c = dict(c, source=["def paged_gather(pool, block_table, seq_len):\n", "    return pool\n"])
        cells.append(c)
    cells.insert(3, {"cell_type": "code", "metadata": {}, "source": "helper = 1", "outputs": [], "execution_count": None})
    r = notebooks.restore(a, dict(nb, cells=cells))
    by = {g.cell.id: g for g in r.cells if g.cell is not None}
    ours = {c.id: c for c in notebooks.cells(a)}
    assert by["ch06-q2-public"].source == ours["ch06-q2-public"].text          # the test, not the edit
    assert by["ch06-q1-hidden"].kind == "hidden"                             # back in place
    assert "return pool" in by["ch06-q4"].source                              # the student's answer
    assert [g.source for g in r.cells if g.kind == "extra"] == ["helper = 1"]
    assert r.tampering["q1"] == ["hidden test cell q1_hidden deleted (restored)"]
    assert set(r.tampering["q2"]) == {"public test cell q2_public: points changed from 1 to 50 (ignored)",
                                      "public test cell q2_public edited (restored)"}
    assert "q3" not in r.tampering and any("metadata stripped" in n for n in r.notes["q3"])


def test_restore_finds_cells_that_lost_ids_and_metadata():
    a = spec.load(SOURCE, "ch06")
    nb = _release()
    for c in nb["cells"]:
        c.pop("id")
        c["metadata"] = {}
        if "def kv_cache_bytes" in "".join(c["source"]):
            c["source"] = ["import math\n", "def kv_cache_bytes(config, seq_len, batch=1, bytes_per_elem=2):\n",
                           "    return 0\n"]
    r = notebooks.restore(a, nb)
    assert not r.tampering
    ans = [g for g in r.cells if g.kind == "answer" and g.qid == "q1"][0]
    assert "return 0" in ans.source and "graded the cell that defines kv_cache_bytes" in r.notes["q1"][0]
    assert not [g for g in r.cells if g.kind == "extra"]


def test_restore_of_a_broken_file():
    with pytest.raises(ValueError, match="not a readable notebook"):
        notebooks.load_submission(SOURCE / "ch06" / "ch06.py")


# -------------------------------------------------------------------------------------------------
# Gradebooks and Gradescope
# -------------------------------------------------------------------------------------------------
def _result():
    """A graded submission as the engine returns it (two questions, one partly wrong)."""
    q1 = engine.QuestionResult("q1", "KV bytes", 1, 2, engine.TestResult(True), engine.TestResult(True))
    q2 = engine.QuestionResult("q2", "MLA", 1, 1, engine.TestResult(True),
                               engine.TestResult(False, "mla_kv_bytes_per_token: expected 70,272, got 140,544"),
                               tampering=["public test cell q2_public edited (restored)"])
    for q in (q1, q2):
        engine._summarise(q)
    return engine.SubmissionResult("alice", "ch06", None, [q1, q2], seconds=4.2)


def _rows(results):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=export_fields())
    w.writeheader()
    for r in results:
        w.writerows(r.rows())
    return list(csv.DictReader(io.StringIO(buf.getvalue())))


def export_fields():
    from grading.cli import CSV_FIELDS
    return CSV_FIELDS


def test_grader_csv_reports_scores_messages_and_tampering():
    rows = _rows([_result()])
    assert [(r["question"], float(r["score"]), float(r["max_score"])) for r in rows] == [("q1", 3, 3), ("q2", 1, 2)]
    assert rows[1]["status"] == "failed hidden tests" and "140,544" in rows[1]["message"]
    assert rows[1]["tampering"] == "public test cell q2_public edited (restored)"


def _canvas_accepts(text: str) -> dict:
    """Canvas's gradebook importer's rules for the file (instructure/canvas-lms,
    app/models/gradebook_importer.rb: ``row_has_student_headers?``, ``update_column_count``,
    ``header?``, ``check_for_non_student_row``, ``process_pp``, the ``decimal_comma_to_period``
    converter); returns {student key: {assignment: score}}."""
    rows = list(csv.reader(io.StringIO(text)))
    head = rows[0]
    assert len(head) > 3 and "Student" in head[0] and "ID" in head[1]            # row_has_student_headers?
    n = 3
    if re.search(r"SIS\s+Login\s+ID", head[n - 1]):
        n += 1
    elif re.search(r"SIS\s+User\s+ID", head[n - 1]) and re.search(r"SIS\s+Login\s+ID", head[n]):
        n += 2
    assert "Section" in head[n - 1]                                              # header?: last student column
    assignments = head[n:]
    assert assignments and not any(h in ("Current Score", "Final Score") for h in assignments)
    assert rows[1][0].startswith("Points Possible")                              # check_for_non_student_row
    out = {}
    for row in rows[2:]:
        assert len(row) == len(head)
        key = row[1] or row[3] or row[0]                                         # ID, else SIS login, else name
        vals = {}
        for h, v in zip(assignments, row[n:]):
            if v.strip():
                assert re.match(r"^-?[0-9.,]+%?$", v), v                         # a number Canvas reads
                vals[h] = float(v)
        out[key] = vals
    return out


def test_canvas_csv_follows_the_gradebook_importer(tmp_path):
    r2 = _result()
    r2.student = "bob"
    r3 = engine.SubmissionResult("bob", "ch07", None, [engine.QuestionResult("q1", "ring", 2, 2, engine.TestResult(True),
                                                                               engine.TestResult(True))])
    engine._summarise(r3.questions[0])
    rows = _rows([_result(), r2, r3])
    export.write_canvas(rows, tmp_path / "canvas.csv")
    got = _canvas_accepts((tmp_path / "canvas.csv").read_text())
    assert got == {"alice": {"ch06": 4.0}, "bob": {"ch06": 4.0, "ch07": 4.0}}
    pp = list(csv.reader(open(tmp_path / "canvas.csv")))[1]
    assert pp[5:] == ["5", "4"]
    # with the course's exported gradebook as roster: Canvas IDs, SIS IDs and sections come from it
    roster = tmp_path / "export.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Assignment 1 (1)\n"
                      "    Points Possible,,,,,10\nDoe, Alice,1042,S-77,alice,Section A,\n"
                      "\"Roe, Bob\",1043,S-78,bob,Section B,\n")
    export.write_canvas(rows, tmp_path / "canvas2.csv", roster)
    got = _canvas_accepts((tmp_path / "canvas2.csv").read_text())
    assert got == {"1043": {"ch06": 4.0, "ch07": 4.0}} or "1043" in got
    lines = list(csv.reader(open(tmp_path / "canvas2.csv")))
    assert ["Roe, Bob", "1043", "S-78", "bob", "Section B"] in [ln[:5] for ln in lines]


def _moodle_accepts(text: str, user_col: str = "Username") -> dict:
    """Moodle's CSV grade import (moodle/moodle grade/import/csv/classes/load_data.php at
    162f42f0dae3758c9e9b9973749b0a7cd28d9312: one mapped user column, no row with one field,
    grades through ``unformat_float`` or '' / '-' for none, feedback mapped per item)."""
    rows = list(csv.reader(io.StringIO(text)))
    head = rows[0]
    assert head[0] == user_col and len(set(head)) == len(head)        # each column maps once (no collision)
    out = {}
    for row in rows[1:]:
        assert len(row) > 1 and row[0].strip()
        grades = {}
        for h, v in zip(head[1:], row[1:]):
            if h.endswith(" feedback"):
                continue
            if v.strip() in ("", "-"):
                continue
            grades[h] = float(v)                                        # unformat_float: a plain decimal
        out[row[0]] = grades
    return out


def test_moodle_csv_follows_the_grade_import(tmp_path):
    rows = _rows([_result()])
    export.write_moodle(rows, tmp_path / "moodle.csv")
    text = (tmp_path / "moodle.csv").read_text()
    assert _moodle_accepts(text) == {"alice": {"ch06": 4.0}}
    head, row = list(csv.reader(io.StringIO(text)))
    assert head == ["Username", "ch06", "ch06 feedback"] and "q2: 1/2" in row[2] and "140,544" in row[2]


def test_gradescope_results_json_follows_the_spec():
    res = export.results_json(_result())
    check_results_json(res)
    assert res["score"] == 4.0 and len(res["tests"]) == 4
    hidden = [t for t in res["tests"] if "hidden" in t["name"]]
    assert all(t["visibility"] == "after_due_date" for t in hidden)
    failed = [t for t in res["tests"] if t["status"] == "failed"]
    assert len(failed) == 1 and "140,544" in failed[0]["output"] and failed[0]["score"] == 0
    assert sum(t["score"] for t in res["tests"]) == res["score"]
    assert "edited (restored)" in [t for t in res["tests"] if t["number"] == "2.1"][0]["output"]


def test_gradescope_zip_layout(tmp_path):
    """setup.sh and run_autograder at the archive's root (the spec's note on zipping), executable;
    the grader, this assignment's spec only, and the package; no notebook with keys."""
    out = export.gradescope_zip("ch06", tmp_path / "ch06.zip", SOURCE, seed=3, timeout=30)
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        assert {"setup.sh", "run_autograder", "requirements.txt"} <= set(names)
        for n in ("setup.sh", "run_autograder"):
            assert (z.getinfo(n).external_attr >> 16) & 0o111, n
        assert "grader/tools/grade.py" in names and "grader/assignments/source/ch06/ch06.py" in names
        assert "grader/src/llm_dataflow/core/accounting.py" in names
        assert not [n for n in names if n.endswith(".ipynb") or "/ch05/" in n or "__pycache__" in n]
        run = z.read("run_autograder").decode()
        assert run.startswith("#!/usr/bin/env bash") and "gradescope-run ch06" in run and "--seed 3" in run
        assert "/autograder/results/results.json" in run.replace("$ROOT", "/autograder")
        req = z.read("requirements.txt").decode()
        assert re.search(r"^numpy==\d", req, re.M) and "torch" not in req
