"""An assignment's spec: the Python module ``<source>/chNN/chNN.py`` that every notebook of the
assignment, and its grading, are made from.

A spec module defines:

* ``TITLE``, ``INTRO`` (markdown) and ``SETUP`` (the locked first code cell: imports, and the
  check functions of :mod:`llm_dataflow.checks`);
* ``params(rng)``: the values a class's version uses (models, GPUs, lengths, seeds of the
  hidden inputs).  ``rng`` is ``None`` for the book's own version, else a ``random.Random`` seeded
  by the class's ``--seed`` and the assignment's name, so each class gets its own version;
* ``QUESTIONS``: one dict per question with ``id`` (``q1`` …), ``title``, ``points`` (public,
  hidden), ``returns`` (what the answer is, said in the question), ``prose`` (markdown),
  ``answer`` (the answer cell, the key between ``### BEGIN SOLUTION`` / ``### END SOLUTION``),
  ``names`` (what the answer defines), ``public`` and ``hidden`` (test code), optionally
  ``setup`` (a locked cell before the answer), ``grader_public`` / ``grader_hidden`` (the
  grader's version of a test that must probe the kernel differently from the notebook's),
  ``alternative`` (a correct answer written differently from the key) and ``mistakes`` (wrong
  answers students write, each with a fragment of the message it must get).

Texts are templates: ``«name»`` is the parameter ``name`` (besides ``params``' own:
``«points_line»``, the points of each question, and ``«run_all»``, :data:`RUN_ALL`); ``«name:,»`` formats it
(``format(value, ",")``); ``«name!r»`` is its ``repr``.
"""
from __future__ import annotations

import importlib.util
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_PLACEHOLDER = re.compile(r"«([A-Za-z_][A-Za-z0-9_]*)(!r)?(?::([^»]*))?»")
_REQUIRED = ("id", "title", "points", "returns", "prose", "answer", "names", "public", "hidden")


#: The paragraph every assignment's INTRO ends with (its placeholder ``«run_all»``).
RUN_ALL = """\
**Run All and Validate.** *Run ▸ Run All Cells* stops at the first cell that raises: an answer
that still raises `NotImplementedError`, or a public test that fails. So work one question at a
time: run its answer cell, then the test cell under it. nbgrader's **Validate** button runs the
whole notebook in a fresh kernel and lists the public test cells that fail."""


def render(text: str, params: dict) -> str:
    """``text`` with every ``«name»`` placeholder replaced (see the module docstring).

    Raises:
        KeyError: a placeholder names no parameter.
    """
    def sub(m):
        name, rep, fmt = m.group(1), m.group(2), m.group(3)
        if name not in params:
            raise KeyError(f"template placeholder «{name}» has no parameter (have: {', '.join(sorted(params))})")
        v = params[name]
        if rep:
            return repr(v)
        return format(v, fmt) if fmt else str(v)

    return _PLACEHOLDER.sub(sub, text)


@dataclass(frozen=True)
class Question:
    """One question of an assignment, rendered for one version (its parameters applied)."""

    id: str
    title: str
    public_points: float
    hidden_points: float
    returns: str
    prose: str
    answer: str
    names: tuple
    public: str
    hidden: str
    setup: str
    grader_public: str
    grader_hidden: str
    alternative: str
    mistakes: tuple

    @property
    def points(self) -> float:
        return self.public_points + self.hidden_points


@dataclass(frozen=True)
class Assignment:
    """An assignment rendered for one version: ``seed`` ``None`` is the book's own."""

    name: str
    seed: int | None
    title: str
    intro: str
    setup: str
    params: dict
    questions: tuple

    @property
    def points(self) -> float:
        return sum(q.points for q in self.questions)

    def question(self, qid: str) -> Question:
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(qid)


def assignment_names(source: Path) -> list[str]:
    """The assignments under ``source``: folders ``chNN`` holding a spec ``chNN.py``."""
    return sorted(p.name for p in Path(source).iterdir() if (p / f"{p.name}.py").is_file())


@lru_cache(maxsize=64)
def _module(path: str, mtime: float):
    spec = importlib.util.spec_from_file_location(f"ldf_assignment_{Path(path).stem}_{abs(hash(path))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(source: Path, name: str, seed: int | None = None) -> Assignment:
    """The assignment ``name`` of ``source`` for the class ``seed`` (``None``: the book's version).

    Raises:
        FileNotFoundError: no spec ``source/name/name.py``.
        ValueError: a question lacks a required field, or two share an id.
    """
    path = Path(source) / name / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no assignment spec {path}")
    mod = _module(str(path.resolve()), path.stat().st_mtime)
    rng = None if seed is None else random.Random(f"{seed}/{name}")
    params = dict(mod.params(rng))
    params.setdefault("name", name)
    qs = []
    for i, q in enumerate(mod.QUESTIONS):
        missing = [k for k in _REQUIRED if k not in q]
        if missing:
            raise ValueError(f"{path}: question {i + 1} lacks {', '.join(missing)}")
        pub, hid = q["points"]
        r = lambda key: render(q.get(key) or "", params)  # noqa: E731
        qs.append(Question(q["id"], render(q["title"], params), float(pub), float(hid), r("returns"), r("prose"),
                           r("answer"), tuple(q["names"]), r("public"), r("hidden"), r("setup"),
                           r("grader_public"), r("grader_hidden"), r("alternative"),
                           tuple((render(code, params), frag) for code, frag in q.get("mistakes", ()))))
    ids = [q.id for q in qs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: question ids repeat: {ids}")
    pts = ", ".join(f"Q{q.id[1:]} {q.points:g}" for q in qs)
    params["points_line"] = f"Points: {pts} ({sum(q.points for q in qs):g} in total)."
    params["run_all"] = RUN_ALL
    return Assignment(name, seed, render(mod.TITLE, params), render(mod.INTRO, params), render(mod.SETUP, params),
                      params, tuple(qs))


def solution_code(answer: str) -> str:
    """The answer cell with its solution kept and the markers removed (the key as a student
    would have typed it)."""
    return "\n".join(ln for ln in answer.splitlines() if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def student_code(answer: str) -> str:
    """The answer cell as the student version shows it (nbgrader's ClearSolutions: each solution
    block becomes ``raise NotImplementedError()`` at its indentation)."""
    out, skipping = [], False
    for ln in answer.splitlines():
        s = ln.strip()
        if s == "### BEGIN SOLUTION":
            out.append(ln[: len(ln) - len(ln.lstrip())] + "# YOUR CODE HERE")
            out.append(ln[: len(ln) - len(ln.lstrip())] + "raise NotImplementedError()")
            skipping = True
        elif s == "### END SOLUTION":
            skipping = False
        elif not skipping:
            out.append(ln)
    return "\n".join(out)

