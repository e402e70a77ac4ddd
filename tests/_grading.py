"""Helpers of the grading tests: the grader's package (``tools/grading``) and a *direct* run of an
assignment's tests in this process, without a kernel (fast: for checking every question of every
version; the kernel path is tested by ``tests/test_grading.py``)."""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

from grading import cli, engine, export, feedback, kernel, notebooks, spec, wire  # noqa: E402,F401

SOURCE = ROOT / "assignments" / "source"
RELEASE = ROOT / "assignments" / "release"
NAMES = spec.assignment_names(SOURCE)


def _probe(ns: dict):
    def in_kernel(code, _what="", **inputs):
        scope = dict(ns)
        scope.update(inputs)
        exec(code, scope)  # noqa: S102 - the assignment's own probe
        return scope["result"]
    return in_kernel


def direct(a: spec.Assignment, answers: dict | None = None) -> dict:
    """``{qid: {"public": (passed, message), "hidden": (passed, message)}}`` for the key, or for
    ``answers`` (``qid → code``) where given, all run in one namespace of this process."""
    ns: dict = {"__name__": f"direct_{a.name}"}
    exec(a.setup, ns)  # noqa: S102
    ns["in_kernel"] = _probe(ns)
    for q in a.questions:
        if q.setup.strip():
            exec(q.setup, ns)  # noqa: S102
    for q in a.questions:
        code = (answers or {}).get(q.id)
        try:
            exec(spec.solution_code(q.answer) if code is None else code, ns)  # noqa: S102
        except NotImplementedError:
            pass
    out = {}
    for q in a.questions:
        res = {}
        for kind, src in (("public", q.grader_public or q.public), ("hidden", q.grader_hidden or q.hidden)):
            missing = [n for n in q.names if n not in ns]
            if missing:
                res[kind] = (False, f"not defined: {missing}")
                continue
            label = f"<{a.name} {q.id} {kind}>"
            try:
                exec(compile(src, label, "exec"), dict(ns))  # noqa: S102
                res[kind] = (True, "")
            except AssertionError as exc:
                res[kind] = (False, str(exc) or "".join(traceback.format_exception_only(type(exc), exc)))
            except Exception as exc:  # noqa: BLE001 - reported to the test
                res[kind] = (False, f"{type(exc).__name__}: {exc}")
        out[q.id] = res
    return out


#: results.json's documented keys (gradescope/autograder_samples docs/specs.md at commit
#: af5dee4cf9b2c930c47dc0e4320c7e5ab2580564, https://gradescope-autograders.readthedocs.io/en/latest/specs/)
GS_TOP = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
          "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
GS_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
           "visibility", "extra_data"}
GS_VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
GS_FORMATS = {"text", "html", "simple_format", "md", "ansi"}


def check_results_json(res: dict) -> None:
    """``res`` uses only the documented fields, types and values of Gradescope's results.json."""
    assert set(res) <= GS_TOP and ("score" in res or all("score" in t for t in res["tests"]))
    assert isinstance(res.get("score", 0.0), (int, float)) and isinstance(res.get("execution_time", 0), int)
    assert res.get("visibility", "visible") in GS_VISIBILITY and res.get("stdout_visibility", "visible") in GS_VISIBILITY
    assert res.get("output_format", "text") in GS_FORMATS and isinstance(res.get("output", ""), str)
    for t in res["tests"]:
        assert set(t) <= GS_TEST, set(t) - GS_TEST
        assert isinstance(t["score"], (int, float)) and isinstance(t.get("max_score", 0), (int, float))
        assert t.get("status", "passed") in ("passed", "failed") and t.get("visibility", "visible") in GS_VISIBILITY
        assert t.get("output_format", "text") in GS_FORMATS and isinstance(t.get("name", ""), str)
        assert "\r" not in t.get("output", "")                      # Unix line endings (the spec's note)
    json.dumps(res)
