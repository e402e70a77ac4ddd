"""The data that crosses between the grader and a student's kernel, and the kernel's side of it.

Only *data* crosses, as JSON, never pickles (unpickling what a kernel sends would run the
kernel's code in the grader): numbers, strings, ``None``, lists, tuples, dicts, sets and NumPy
arrays of numbers (dtype, shape and raw bytes, base64).  Anything else arrives as an opaque
description (its type name and a short repr) that compares equal to nothing.  Integers travel as
decimal strings (any size), floats as ``repr`` (so ``nan`` and ``inf`` survive); a NumPy scalar
becomes the Python number of its kind — ``numpy.int64`` an integer, ``numpy.float32`` a float — so
the grader checks the *value* a student returned, whatever type carried it.

This file is also the kernel's helper: :func:`tools.grading.kernel` runs its source text inside
the student's kernel as the module ``_ldf_wire`` after the student's cells, and each request is a
call to :func:`serve`.  It uses only the standard library there (NumPy when the kernel has it).
"""
from __future__ import annotations

import base64
import json
import math
import numbers
import traceback

#: the MIME type of a reply (a display_data message the kernel publishes)
MIME = "application/vnd.ldf.grader+json"
#: a reply above this many bytes of JSON is refused (a student function returning a huge array)
MAX_REPLY_BYTES = 64 * 2**20
MAX_DEPTH = 40


class Opaque:
    """Something a kernel returned that is not data (a function, a module, a class instance)."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"

    def __eq__(self, other) -> bool:
        return False

    __hash__ = object.__hash__


class EncodeError(ValueError):
    """A value cannot be sent (too deep, too large, an array of objects)."""


def _np():
    try:
        import numpy
    except ImportError:  # the kernel or grader has no NumPy: no arrays travel
        return None
    return numpy


def encode(x, depth: int = 0):
    """``x`` as JSON-ready data (see the module docstring).

    Raises:
        EncodeError: nesting deeper than ``MAX_DEPTH``.
    """
    if depth > MAX_DEPTH:
        raise EncodeError(f"nesting deeper than {MAX_DEPTH}")
    np = _np()
    if x is None or isinstance(x, (bool, str)):
        return x
    if np is not None and isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, numbers.Integral):
        return {"$int": str(int(x))}
    if isinstance(x, numbers.Real):
        return {"$float": repr(float(x))}
    if isinstance(x, numbers.Complex):
        return {"$complex": [repr(float(x.real)), repr(float(x.imag))]}
    if isinstance(x, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(x)).decode()}
    if np is not None and (isinstance(x, np.ndarray) or hasattr(x, "__array__")) and not isinstance(x, (list, tuple, dict)):
        try:
            a = np.asarray(x)
        except Exception as exc:  # noqa: BLE001 - an object whose __array__ fails is opaque
            return {"$opaque": [type(x).__name__, f"__array__ failed: {exc}"[:200]]}
        if a.dtype.kind in "biufc":
            a = np.ascontiguousarray(a)
            return {"$nd": [a.dtype.str, list(a.shape), base64.b64encode(a.tobytes()).decode()]}
        if a.dtype.kind == "O" and a.size <= 100_000:
            return {"$ndobj": [list(a.shape), [encode(v, depth + 1) for v in a.ravel().tolist()]]}
        return {"$opaque": [type(x).__name__, f"array of dtype {a.dtype}"]}
    if isinstance(x, list):
        return {"$list": [encode(v, depth + 1) for v in x]}
    if isinstance(x, tuple):
        return {"$tuple": [encode(v, depth + 1) for v in x]}
    if isinstance(x, (set, frozenset)):
        return {"$set": [encode(v, depth + 1) for v in x]}
    if isinstance(x, dict):
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if isinstance(x, range):
        return {"$list": [encode(v, depth + 1) for v in x]}
    try:
        text = repr(x)
    except Exception:  # noqa: BLE001 - a repr that raises is still opaque
        text = "?"
    return {"$opaque": [type(x).__name__, text[:200]]}


_ND_KINDS = set("biufc")


def decode(d):
    """The value :func:`encode` described (arrays as NumPy arrays, which the decoder needs).

    Raises:
        ValueError: malformed data, or an array dtype that is not numeric.
    """
    if d is None or isinstance(d, (bool, str)):
        return d
    if isinstance(d, (int, float)):         # plain JSON numbers (not produced by encode, accepted)
        return d
    if not isinstance(d, dict) or len(d) != 1:
        raise ValueError(f"malformed value {str(d)[:80]}")
    (tag, v), = d.items()
    if tag == "$int":
        return int(v)
    if tag == "$float":
        return float(v)
    if tag == "$complex":
        return complex(float(v[0]), float(v[1]))
    if tag == "$bytes":
        return base64.b64decode(v)
    if tag == "$list":
        return [decode(x) for x in v]
    if tag == "$tuple":
        return tuple(decode(x) for x in v)
    if tag == "$set":
        return {_hashable(decode(x)) for x in v}
    if tag == "$dict":
        return {_hashable(decode(k)): decode(val) for k, val in v}
    if tag == "$nd":
        np = _np()
        dt = np.dtype(v[0])
        if dt.kind not in _ND_KINDS:
            raise ValueError(f"array dtype {dt} is not numeric")
        raw = base64.b64decode(v[2])
        shape = tuple(int(s) for s in v[1])
        n = math.prod(shape)
        if n * dt.itemsize != len(raw):
            raise ValueError("array bytes do not match its shape")
        return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
    if tag == "$ndobj":
        np = _np()
        items = [decode(x) for x in v[1]]
        a = np.empty(len(items), dtype=object)
        a[:] = items
        return a.reshape(tuple(int(s) for s in v[0]))
    if tag == "$opaque":
        return Opaque(str(v[0]), str(v[1]))
    raise ValueError(f"unknown tag {tag!r}")


def _hashable(x):
    if isinstance(x, list):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    return x


# ---------------------------------------------------------------------------------------------
# The kernel's side: run in the student's kernel as the module ``_ldf_wire``
# ---------------------------------------------------------------------------------------------
def _user_ns() -> dict:
    from IPython import get_ipython
    return get_ipython().user_ns


def _exception(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
            "message": str(exc)[:2000], "traceback": "".join(tb)[-4000:]}


def _describe(ns: dict, name: str) -> dict:
    if name not in ns:
        return {"kind": "missing"}
    v = ns[name]
    if callable(v) and not isinstance(v, type):
        return {"kind": "callable", "type": type(v).__name__}
    try:
        return {"kind": "value", "value": encode(v)}
    except Exception as exc:  # noqa: BLE001 - the grader reports it
        return {"kind": "unencodable", "type": type(v).__name__, "error": str(exc)[:200]}


def _handle(req: dict) -> dict:
    ns = _user_ns()
    op = req["op"]
    if op == "get":
        return {"names": {n: _describe(ns, n) for n in req["names"]}}
    try:
        if op == "call":
            fn = ns[req["name"]]
            args, kwargs = decode(req["args"]), decode(req["kwargs"])
            value = fn(*args, **kwargs)
            out = {"ok": True, "value": encode(value)}
            if req.get("return_args"):
                out["args_after"] = encode(args)
            return out
        if op == "exec":
            scope = dict(ns)
            scope.update(decode(req["inputs"]))
            exec(req["code"], scope)  # noqa: S102 - the grader's probe, in the student's kernel
            return {"ok": True, "value": encode(scope.get("result"))}
    except BaseException as exc:  # noqa: BLE001 - a student's exception is data for the grader
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"ok": False, "exc": _exception(exc)}
    raise ValueError(f"unknown op {op!r}")


def serve(request_json: str) -> None:
    """Answer one request from the grader: publish ``{"nonce", "reply"}`` as display data."""
    from IPython.display import publish_display_data

    req = json.loads(request_json)
    try:
        reply = _handle(req)
        text = json.dumps(reply)
        if len(text) > MAX_REPLY_BYTES:
            reply = {"ok": False, "exc": {"type": "ResultTooLarge", "mro": ["ResultTooLarge"],
                                          "message": f"the reply is {len(text):,} bytes of JSON "
                                                     f"(limit {MAX_REPLY_BYTES:,})", "traceback": ""}}
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - encoding failed: report it
        reply = {"ok": False, "exc": _exception(exc)}
    publish_display_data({MIME: {"nonce": req["nonce"], "reply": reply}})
