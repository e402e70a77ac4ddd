"""Checks for the graded assignments (``assignments/``): the assertions their test cells make.

The same test code runs in two places.  A student runs a question's public test cell in the
notebook, where these functions check the real values.  ``tools/grade.py`` runs the public and
hidden tests in *its own* process, where the student's names are stand-ins that carry each value,
or each call, to and from the student's kernel: the comparisons below run in the grader, with its
own ``math`` and ``numpy``, never in the kernel the student controls.

Each check accepts any correct value, whatever type carries it:

* an integer is any :class:`numbers.Integral` (``int``, ``numpy.int64`` …) but not ``bool``;
* a real number is any :class:`numbers.Real` (``float``, ``numpy.float32`` …) but not ``bool``,
  within the stated tolerance — the tests use ``rel=1e-3`` to ``1e-5`` for values a student works
  out, loose enough that FP32 arithmetic passes (FP32 carries about 7 significant digits);
* an array is anything ``numpy.asarray`` turns into numbers of the right shape.

A failed check raises ``AssertionError`` whose message names what was checked, what was expected,
what came back, and — where the ratio gives it away — the likely mistake (twice the value: K and V
counted twice; 1.07×: GiB where GB was asked …).  ``hints`` maps known wrong values to a sentence
naming the mistake that produces them.

(No ``__all__``: these are not calculators of the book but the tests' vocabulary; a notebook
imports them by name, ``from llm_dataflow.checks import expect_int, ...``.)
"""
from __future__ import annotations

import math
import numbers
import sys

#: ratios of a wrong value to the right one that name a common mistake (checked in this order)
_RATIO_HINTS = (
    (1e9 / 2**30, "GiB where GB (10⁹ B) was asked for"),
    (2**30 / 1e9, "GB where GiB (2³⁰ B) was asked for"),
    (2.0, "twice the expected value (something counted twice, or a factor 2 too many)"),
    (0.5, "half the expected value (a factor 2 missing: K and V? 2 FLOPs per multiply-add?)"),
    (1e3, "1000× too large (a unit: ms for s, MB for GB, µs for ms?)"),
    (1e-3, "1000× too small (a unit: s for ms, GB for MB, ms for µs?)"),
    (1e6, "10⁶× too large (a unit?)"),
    (1e-6, "10⁶× too small (a unit?)"),
    (8.0, "8× too large (bits where bytes were asked for?)"),
    (0.125, "8× too small (bytes where bits were asked for?)"),
)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _show(x) -> str:
    """A short description of a value: its type and repr (cut at 200 characters)."""
    r = repr(x)
    if len(r) > 200:
        r = r[:197] + "..."
    return f"{type(x).__name__} {r}"


def _num(x) -> str:
    """A number as a plain repr (``1.5``, not ``np.float64(1.5)``)."""
    return repr(x.item()) if hasattr(x, "item") else repr(x)


def _hint_for(got: float, want: float, hints, rel: float) -> str:
    """The sentence naming the mistake that gives ``got`` instead of ``want``, or ''."""
    for value, text in (hints.items() if isinstance(hints, dict) else hints or ()):
        if _is_real(value) and math.isclose(got, value, rel_tol=max(rel, 1e-9), abs_tol=0.0):
            return " — " + text
    if want and got and math.isfinite(got) and math.isfinite(want) and (got > 0) == (want > 0):
        ratio = got / want
        for r, text in _RATIO_HINTS:
            if math.isclose(ratio, r, rel_tol=2e-3):
                return " — " + text
    return ""


def expect_int(got, want: int, what: str, hints=None) -> None:
    """``got`` is an integer (any :class:`numbers.Integral`, not ``bool``) equal to ``want``.

    Raises:
        AssertionError: naming ``what``, the expected and the received value (and a hint).
    """
    if not _is_int(got):
        extra = ""
        if _is_real(got) and math.isfinite(got) and float(got).is_integer():
            extra = " (the right kind of number, but the question asks for an integer: return int(...))"
        raise AssertionError(f"{what}: expected an integer, got {_show(got)}{extra}")
    if int(got) != int(want):
        raise AssertionError(f"{what}: expected {int(want):,}, got {int(got):,}"
                             + _hint_for(float(got), float(want), hints, 0.0))


def expect_close(got, want: float, what: str, rel: float = 1e-6, abs: float = 0.0, hints=None) -> None:
    """``got`` is a real number (any :class:`numbers.Real`, not ``bool``) within ``rel`` (relative)
    or ``abs`` (absolute) of ``want``.

    Raises:
        AssertionError: naming ``what``, the expected value with its tolerance and the received value.
    """
    if not _is_real(got):
        raise AssertionError(f"{what}: expected a number, got {_show(got)}")
    g = float(got)
    if not math.isfinite(g):
        raise AssertionError(f"{what}: expected {want:.6g}, got {g!r}")
    if not math.isclose(g, want, rel_tol=rel, abs_tol=abs):
        tol = f"within {rel:.0e} relative" + (f" or {abs:g} absolute" if abs else "")
        raise AssertionError(f"{what}: expected {want:.6g} ({tol}), got {g:.6g}" + _hint_for(g, want, hints, rel))


def expect_equal(got, want, what: str) -> None:
    """``got == want`` for strings, booleans, tuples of them and ``None``.

    Raises:
        AssertionError: naming ``what``, the expected and the received value.
    """
    if isinstance(want, bool) and not isinstance(got, bool) and type(got).__name__ not in ("bool_", "bool"):
        raise AssertionError(f"{what}: expected {want!r} (a bool), got {_show(got)}")
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {_show(got)}")


def expect_array(got, want, what: str, rtol: float = 1e-6, atol: float = 0.0, dtype=None, hints=()) -> None:
    """``got`` is array-like with ``want``'s shape and values within ``rtol``/``atol`` (as
    ``numpy.allclose``); with ``dtype`` given, ``got`` must also have that dtype.  ``hints`` is a
    list of ``(wrong_array, sentence)``: a ``got`` that matches a wrong array gets its sentence.

    Raises:
        AssertionError: naming ``what`` and the first difference (shape, dtype, or the worst element).
    """
    import numpy as np

    want = np.asarray(want)
    try:
        g = np.asarray(got)
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is not an array of numbers
        raise AssertionError(f"{what}: expected an array, got {_show(got)} ({exc})") from None
    if g.dtype == object or g.dtype.kind not in "biufc":
        raise AssertionError(f"{what}: expected an array of numbers, got {_show(got)}")
    if g.shape != want.shape:
        raise AssertionError(f"{what}: expected shape {want.shape}, got shape {g.shape}")
    if dtype is not None and g.dtype != np.dtype(dtype):
        raise AssertionError(f"{what}: expected dtype {np.dtype(dtype)}, got dtype {g.dtype}")
    if want.size == 0:
        return
    gv, wv = g.astype(np.float64 if g.dtype.kind != "c" else np.complex128), want
    if not np.isfinite(gv).all() and np.isfinite(wv).all():
        raise AssertionError(f"{what}: contains inf or NaN where every expected value is finite (an overflow, "
                             f"or 0/0: subtract the maximum before exp?)")
    bad = ~np.isclose(gv, wv, rtol=rtol, atol=atol)
    if bad.any():
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(gv - wv) * bad), want.shape))
        hint = ""
        for wrong, text in hints:
            wrong = np.asarray(wrong)
            if wrong.shape == gv.shape and np.allclose(gv, wrong, rtol=max(rtol, 1e-9), atol=atol, equal_nan=True):
                hint = " — " + text
                break
        raise AssertionError(f"{what}: {int(bad.sum())} of {want.size} elements differ (rtol={rtol:g}, atol={atol:g}); "
                             f"at index {idx} expected {_num(wv[idx])}, got {_num(gv[idx])}{hint}")


def expect_raises(exc_type, fn, *args, what: str = "", **kwargs) -> None:
    """``fn(*args, **kwargs)`` raises ``exc_type`` (or a subclass).

    Raises:
        AssertionError: it returned, naming ``what`` and the value it returned.
    """
    try:
        value = fn(*args, **kwargs)
    except exc_type:
        return
    raise AssertionError(f"{what or getattr(fn, '__name__', 'the call')}: expected {exc_type.__name__} to be "
                         f"raised, but it returned {_show(value)}")


def in_kernel(code: str, _what: str = "", **inputs):
    """Run ``code`` with the notebook's names and ``inputs`` bound; return the value it assigns to
    ``result`` (``_what`` names the call in the grader's messages).  In a notebook this simply runs here; the grader's version runs ``code`` in the
    student's kernel and brings ``result`` back as data (a probe that must live where the student's
    objects are: a ring of ranks their function sends through).

    Raises:
        NameError: ``code`` did not set ``result``.
    """
    main = sys.modules["__main__"].__dict__
    ns = dict(main)
    ns.update(inputs)
    exec(code, ns)  # noqa: S102 - the test's own code, in the student's own notebook
    if "result" not in ns:
        raise NameError("the probe did not set `result`")
    return ns["result"]
