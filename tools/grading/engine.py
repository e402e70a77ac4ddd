"""Grading one submission: its cells run in the student's kernel, its tests run here.

For each submission:

1. the notebook is restored (:func:`grading.notebooks.restore`): locked cells from the
   assignment, answers and added cells from the student;
2. a fresh kernel runs those cells one by one, in an empty temporary folder (the cells arrive as
   messages; no file of the assignment is near it).  A cell that overruns ``timeout`` is interrupted; one that kills the kernel
   or ignores the interrupt is skipped and the kernel restarted with the cells before it
   (:class:`grading.kernel.Kernel`) — so a bad cell costs only its own question;
3. question by question, the public and then the hidden tests run **in this process**: the
   student's names are stand-ins (:class:`StudentFunction`, or the decoded value) that carry each
   call to the kernel and its result back as data (:mod:`grading.wire`).  The expected values are
   computed here, from the package, and compared here: patching ``math.isclose`` or
   ``numpy.testing`` in the notebook changes nothing, and nothing of the tests or keys ever
   reaches the kernel.
"""
from __future__ import annotations

import builtins
import math
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import notebooks, wire
from .kernel import Kernel, KernelDied, KernelLost, KernelTimeout
from .spec import Assignment

#: seconds a set-up cell may take (imports on a loaded machine); answers and tests get ``timeout``
SETUP_TIMEOUT = 120.0


# -------------------------------------------------------------------------------------------------
# Stand-ins for the student's names
# -------------------------------------------------------------------------------------------------
class StudentError(Exception):
    """An exception the student's code raised in the kernel.  The class made for each one also
    derives from the built-in exception of the same name (``ValueError`` …) when there is one,
    so a test's ``except ValueError`` catches it as it would in the notebook."""

    info: dict = {}

    def __str__(self) -> str:
        return f"{self.info.get('type', 'Exception')}: {self.info.get('message', '')}"


_CLASSES: dict[str, type] = {}


def student_exception(info: dict, call: str) -> StudentError:
    """A :class:`StudentError` for the kernel's exception description ``info``."""
    name = str(info.get("type", "Exception"))
    base = Exception
    for n in info.get("mro", [name]):
        b = getattr(builtins, str(n), None)
        if isinstance(b, type) and issubclass(b, Exception):
            base = b
            break
    key = f"{name}/{base.__name__}"
    if key not in _CLASSES:
        _CLASSES[key] = type(f"Student{name}", (StudentError, base) if base is not Exception else (StudentError,), {})
    exc = _CLASSES[key](str(info.get("message", "")))
    exc.info = dict(info, call=call)
    return exc


class _Link:
    """The stand-ins' way to the kernel, with the time left for the test that is running."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.deadline = math.inf
        self.last_call = ""

    def remaining(self) -> float:
        return max(0.5, self.deadline - time.monotonic())

    def ask(self, req: dict, what: str):
        self.last_call = what
        reply = self.kernel.request(req, self.remaining())
        if not reply.get("ok"):
            raise student_exception(reply.get("exc") or {}, what)
        return wire.decode(reply.get("value"))


def _short(args, kwargs) -> str:
    parts = [_brief(a) for a in args] + [f"{k}={_brief(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _brief(v) -> str:
    shape = getattr(v, "shape", None)
    if shape is not None and getattr(v, "dtype", None) is not None:
        return f"<array {tuple(shape)} {v.dtype}>"
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class StudentFunction:
    """A student's function, called in their kernel: arguments go there as data, the result
    (or the exception) comes back as data."""

    def __init__(self, link: _Link, name: str):
        self._link, self.__name__ = link, name

    def __call__(self, *args, **kwargs):
        what = f"{self.__name__}({_short(args, kwargs)})"
        return self._link.ask({"op": "call", "name": self.__name__, "args": wire.encode(list(args)),
                                "kwargs": wire.encode(kwargs)}, what)

    def __repr__(self) -> str:
        return f"<the student's {self.__name__}>"


def _in_kernel(link: _Link):
    def in_kernel(code: str, _what: str = "", **inputs):
        """Run the probe ``code`` in the student's kernel (their names and ``inputs`` bound) and
        return its ``result`` as data."""
        return link.ask({"op": "exec", "code": code, "inputs": wire.encode(inputs)}, _what or "a probe of your answer")
    return in_kernel


# -------------------------------------------------------------------------------------------------
# Results
# -------------------------------------------------------------------------------------------------
@dataclass
class TestResult:
    passed: bool
    message: str = ""
    seconds: float = 0.0


@dataclass
class QuestionResult:
    qid: str
    title: str
    public_points: float
    hidden_points: float
    public: TestResult | None = None
    hidden: TestResult | None = None
    answer_status: str = ""
    answer_error: str = ""
    status: str = ""
    message: str = ""
    notes: list = field(default_factory=list)
    tampering: list = field(default_factory=list)

    @property
    def score(self) -> float:
        return (self.public_points if self.public and self.public.passed else 0.0) + \
               (self.hidden_points if self.hidden and self.hidden.passed else 0.0)

    @property
    def max_score(self) -> float:
        return self.public_points + self.hidden_points


@dataclass
class SubmissionResult:
    student: str
    assignment: str
    seed: int | None
    questions: list
    notes: list = field(default_factory=list)       # about the whole notebook
    tampering: list = field(default_factory=list)   # changed locked cells outside any question
    cells: list = field(default_factory=list)       # (Graded, CellRun | None) for the feedback
    seconds: float = 0.0
    restarts: int = 0

    @property
    def score(self) -> float:
        return sum(q.score for q in self.questions)

    @property
    def max_score(self) -> float:
        return sum(q.max_score for q in self.questions)

    def rows(self) -> list[dict]:
        """One row per question (the grader's CSV)."""
        rows = []
        for i, q in enumerate(self.questions):
            tamper = q.tampering + (self.tampering if i == 0 else [])
            notes = [n for n in q.notes if n not in q.tampering]
            notes += [n for n in self.notes if n not in self.tampering] if i == 0 else []
            rows.append(dict(student=self.student, assignment=self.assignment, question=q.qid, score=q.score,
                             max_score=q.max_score, public="passed" if q.public and q.public.passed else "failed",
                             hidden="passed" if q.hidden and q.hidden.passed else "failed", status=q.status,
                             message=q.message, tampering="; ".join(tamper), notes="; ".join(notes)))
        return rows


# -------------------------------------------------------------------------------------------------
# Running the tests here
# -------------------------------------------------------------------------------------------------
def grader_namespace(a: Assignment) -> dict:
    """The tests' namespace before the student's names are bound: the assignment's set-up code
    (imports, the check functions, helpers the questions define) run in this process."""
    ns: dict = {"__name__": f"ldf_grader_{a.name}"}
    exec(compile(a.setup, f"<{a.name} set-up>", "exec"), ns)  # noqa: S102 - the assignment's own code
    for q in a.questions:
        if q.setup.strip():
            exec(compile(q.setup, f"<{a.name} {q.id} set-up>", "exec"), ns)  # noqa: S102
    return ns


def _failure(exc: BaseException, label: str, link: _Link) -> str:
    """The message a student reads for a test that failed with ``exc``."""
    if isinstance(exc, StudentError):
        info = exc.info
        call = info.get("call", "your code")
        if info.get("type") == "NotImplementedError":
            return f"not answered: {call} raised NotImplementedError"
        tb = info.get("traceback", "").strip().splitlines()
        where = f" (your code: {tb[-2].strip()})" if len(tb) >= 2 else ""
        return f"{call} raised {info.get('type')}: {info.get('message')}{where}"
    if isinstance(exc, KernelTimeout):
        return f"timed out: {link.last_call or 'your code'} did not finish in time ({exc})"
    if isinstance(exc, KernelDied):
        return f"the kernel died while running {link.last_call or 'your code'}"
    if isinstance(exc, KernelLost):
        return f"the kernel could not be restarted: {exc}"
    if isinstance(exc, AssertionError):
        msg = str(exc).strip()
        if not msg:   # a bare assert: quote its line
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == label]
            msg = f"failed: {frames[-1].line}" if frames and frames[-1].line else "an assertion failed"
        return msg
    return f"your answer could not be checked: {type(exc).__name__}: {exc}"


def run_tests(code: str, ns: dict, link: _Link, label: str, timeout: float) -> TestResult:
    """Run one test cell's code in a copy of ``ns``; passed unless it raises."""
    t0 = time.monotonic()
    link.deadline = t0 + timeout
    link.last_call = ""
    try:
        exec(compile(code, label, "exec"), dict(ns))  # noqa: S102 - the assignment's tests, in the grader
    except KernelLost:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a message
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(exc, (StudentError,)):
            raise
        return TestResult(False, _failure(exc, label, link), time.monotonic() - t0)
    return TestResult(True, "", time.monotonic() - t0)


def _bind(kernel: Kernel, link: _Link, names: tuple, ns: dict, timeout: float) -> str:
    """Bind the student's ``names`` into ``ns``; '' or the reason they cannot be."""
    try:
        reply = kernel.request({"op": "get", "names": list(names)}, timeout)
    except (KernelTimeout, KernelDied) as exc:
        return f"the kernel did not answer ({type(exc).__name__}: {exc})"
    missing = []
    for n in names:
        d = (reply.get("names") or {}).get(n, {"kind": "missing"})
        if d.get("kind") == "callable":
            ns[n] = StudentFunction(link, n)
        elif d.get("kind") == "value":
            try:
                ns[n] = wire.decode(d.get("value"))
            except (ValueError, TypeError) as exc:
                return f"`{n}` could not be read back ({exc})"
        elif d.get("kind") == "unencodable":
            ns[n] = wire.Opaque(d.get("type", "?"), d.get("error", ""))
        else:
            missing.append(n)
    if missing:
        return "not defined: " + ", ".join(f"`{n}`" for n in missing)
    return ""


# -------------------------------------------------------------------------------------------------
# One submission
# -------------------------------------------------------------------------------------------------
def grade_submission(a: Assignment, notebook: Path, student: str, timeout: float = 60.0,
                     setup_timeout: float = SETUP_TIMEOUT, work: Path | None = None,
                     kernel_user: str | None = None) -> SubmissionResult:
    """Grade one submitted notebook of ``a``; never raises (whatever goes wrong becomes a status).

    ``timeout`` limits each answer cell and each test (public or hidden) of each question, in
    seconds; set-up cells get ``setup_timeout``.  ``kernel_user`` runs the student's kernel as
    that unprivileged account (the grader must be root; see :meth:`grading.kernel.Kernel._as_user`).
    """
    t0 = time.monotonic()
    res = SubmissionResult(student, a.name, a.seed,
                           [QuestionResult(q.id, q.title, q.public_points, q.hidden_points) for q in a.questions])
    byq = {q.qid: q for q in res.questions}
    try:
        restored = notebooks.restore(a, notebooks.load_submission(notebook))
    except ValueError as exc:
        for q in res.questions:
            q.status, q.message = "not graded", str(exc)
        res.notes.append(str(exc))
        res.seconds = time.monotonic() - t0
        return res
    for qid, ns_notes in restored.notes.items():
        (byq[qid].notes if qid in byq else res.notes).extend(ns_notes)
    for qid, t in restored.tampering.items():
        (byq[qid].tampering if qid in byq else res.tampering).extend(t)
    tmp = Path(tempfile.mkdtemp(prefix="ldf-grade-", dir=work))
    kernel = None
    try:
        # the kernel's folder stays empty: no notebook, no spec, no key (its cells arrive as messages)
        cwd, private = tmp / "work", tmp / "private"
        cwd.mkdir()
        kernel = Kernel(cwd, private, start_timeout=setup_timeout, user=kernel_user)
        kernel.start()
        lost = ""
        for g in restored.cells:
            if g.kind in ("markdown", "hidden") or not g.source.strip():
                res.cells.append((g, None))
                if g.kind == "answer" and not g.source.strip():
                    byq[g.qid].answer_status = "empty"
                continue
            if lost:
                res.cells.append((g, None))
                continue
            limit = setup_timeout if g.kind == "setup" else timeout
            try:
                run = kernel.run_cell(g.source, limit)
            except KernelLost as exc:
                lost = str(exc)
                res.cells.append((g, None))
                continue
            res.cells.append((g, run))
            if g.kind == "answer":
                byq[g.qid].answer_status = run.status if run.status != "error" else f"error {run.ename}"
                if run.status == "error":
                    byq[g.qid].answer_error = f"{run.ename}: {run.evalue}"[:300]
        link = _Link(kernel)
        base = grader_namespace(a)
        base["in_kernel"] = _in_kernel(link)
        for q in a.questions:
            qr = byq[q.id]
            if lost:
                qr.public = qr.hidden = TestResult(False, f"not graded: {lost}")
                continue
            try:
                ns = dict(base)
                why = _bind(kernel, link, q.names, ns, timeout)
                if why:
                    if qr.answer_status in ("error NotImplementedError", "empty", ""):
                        why = f"not answered ({why})"
                    elif qr.answer_status in ("timeout", "hung", "died"):
                        why = f"your answer cell {_ANSWER[qr.answer_status]} ({why})"
                    elif qr.answer_status.startswith("error"):
                        why = f"your answer cell raised {qr.answer_error} ({why})"
                    qr.public = qr.hidden = TestResult(False, why)
                    continue
                qr.public = run_tests(q.grader_public or q.public, ns, link, f"<{a.name} {q.id} public tests>", timeout)
                qr.hidden = run_tests(q.grader_hidden or q.hidden, ns, link, f"<{a.name} {q.id} hidden tests>", timeout)
            except KernelLost as exc:
                lost = str(exc)
                qr.public = qr.public or TestResult(False, f"not graded: {lost}")
                qr.hidden = qr.hidden or TestResult(False, f"not graded: {lost}")
        res.restarts = kernel.restarts
    except Exception as exc:  # noqa: BLE001 - the grader goes on with the next submission
        res.notes.append(f"grader: {type(exc).__name__}: {exc}"[:300])
    finally:
        if kernel is not None:
            kernel.kill_quietly()
        shutil.rmtree(tmp, ignore_errors=True)
    for q in res.questions:
        _summarise(q)
    res.seconds = time.monotonic() - t0
    return res


_ANSWER = {"timeout": "was stopped at the time limit", "hung": "ignored the time limit and was killed",
           "died": "killed the kernel"}


def _summarise(q: QuestionResult) -> None:
    q.public = q.public or TestResult(False, "not graded")
    q.hidden = q.hidden or TestResult(False, "not graded")
    if q.public.passed and q.hidden.passed:
        q.status, q.message = "ok", ""
        return
    first = q.public if not q.public.passed else q.hidden
    which = "public" if first is q.public else "hidden"
    msg = first.message
    if msg.startswith("not answered"):
        q.status = "not answered"
    elif msg.startswith("timed out") or q.answer_status in ("timeout", "hung"):
        q.status = "timeout"
    elif "kernel died" in msg or q.answer_status == "died" or "could not be restarted" in msg:
        q.status = "kernel died"
    elif msg.startswith("not graded"):
        q.status = "not graded"
    else:
        q.status = f"failed {which} tests"
    q.message = f"{which} tests: {msg}"
