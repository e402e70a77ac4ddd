"""Helpers of the grading tests: the grader's package (``tools/grading``) and a *direct* run of an
assignment's tests in this process, without a kernel (fast: for checking every question of every
version; the kernel path is tested by ``tests/test_grading.py``)."""
from __future__ import annotations

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
