"""Units and number formatting: bytes per element, GB vs GiB, and measured values.

The book never mixes decimal and binary prefixes: ``GB = 1e9`` bytes (vendors' capacities and
bandwidths), ``GiB = 2**30`` bytes (what allocators and ``nvidia-smi`` report).  See
``book/notation.md``.
"""
from __future__ import annotations

import functools
import math
import numbers

__all__ = [
    "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
    "DTYPE_BITS", "dtype_bits", "dtype_bytes", "check_dtype",
    "fmt_bytes", "fmt_gb", "fmt_gib", "fmt_measured", "MEASURED_MARK", "measured_count", "fmt_num", "fmt_si", "fmt_time", "MAX_DIGITS",
    "require_positive", "require_nonnegative",
]
# also public, for the other modules of the core (not re-exported by ``ldf``): no_overflow, Overflow

KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

#: Storage width of one element, in bits.  ``fp8`` means either FP8 format (E4M3 or E5M2,
#: both 8 bits; OCP 8-bit Floating Point Specification v1.0).  ``int4`` packs two values per byte.
DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "tf32": 32,  # stored as fp32; TF32 is a tensor-core compute mode
    "fp16": 16,
    "bf16": 16,
    "fp8": 8,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "int8": 8,
    "int4": 4,
    "fp4": 4,      # E2M1 (OCP MX v1.0 §5.3.3; NVFP4's element type)
    "e8m0": 8,     # power-of-two scale of the OCP MX formats
    "int32": 32,
    "int64": 64,
}


def check_dtype(dtype: str, allowed: tuple[str, ...] | None = None, field: str = "dtype") -> str:
    """Return ``dtype`` if it is a known dtype name (and in ``allowed`` when given).

    Raises:
        ValueError: naming the field, the value and the allowed names; ``allowed`` neither None
            nor a tuple/list/set of names, ``field`` not a string.
    """
    if not isinstance(field, str):
        raise ValueError(f"field={field!r} is not allowed; give the parameter's name")
    if allowed is not None and (not isinstance(allowed, (tuple, list, set, frozenset))
                                or not all(isinstance(a, str) for a in allowed)):
        raise ValueError(f"allowed={allowed!r} is not allowed; give None or a tuple of dtype names")
    names = tuple(allowed) if allowed is not None else tuple(DTYPE_BITS)
    if not isinstance(dtype, str) or dtype not in names:
        raise ValueError(f"{field}={dtype!r} is not a known dtype; allowed: {', '.join(names)}")
    return dtype


def dtype_bits(dtype: str) -> int:
    """Bits per stored element of ``dtype`` (e.g. ``"bf16"`` → 16, ``"int4"`` → 4).

    Raises:
        ValueError: unknown dtype name.
    """
    return DTYPE_BITS[check_dtype(dtype)]


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (``"int4"`` → 0.5).  Exact counts use :func:`dtype_bits`.

    Raises:
        ValueError: unknown dtype name.
    """
    return dtype_bits(dtype) / 8


_FLOAT_MAX = 1.7976931348623157e308   # sys.float_info.max


def _require_number(field: str, value, integer: bool, positive: bool):
    sign = "a positive" if positive else "a non-negative"
    kind = f"{sign} integer" if integer else f"{sign} finite number"
    ok_type = isinstance(value, int) and not isinstance(value, bool) if integer else isinstance(value, (int, float)) and not isinstance(value, bool)
    if (not ok_type or not (value > 0 if positive else value >= 0)
            or (isinstance(value, float) and not math.isfinite(value))
            or (not integer and isinstance(value, int) and value > _FLOAT_MAX)):   # no float can hold it
        raise ValueError(f"{field}={value!r} is not allowed; it must be {kind}")
    return value


def require_positive(field: str, value, *, integer: bool = True):
    """Return ``value`` if it is a positive integer or, with ``integer=False``, a positive finite
    number (an int too large for a float is not); else raise ``ValueError`` naming ``field``."""
    return _require_number(field, value, integer, True)


def require_nonnegative(field: str, value, *, integer: bool = True):
    """Return ``value`` if it is a non-negative integer or, with ``integer=False``, a non-negative
    finite number (an int too large for a float is not); else raise ``ValueError`` naming ``field``."""
    return _require_number(field, value, integer, False)


#: Most digits a ``fmt_*`` helper prints (``digits``): a float64 carries at most 17 significant
#: decimal digits (IEEE 754-2008 §5.12.2), so more would print noise.
MAX_DIGITS = 17


def _number(field: str, value, *, exact_int: bool = False):
    """``value`` if it is a real number a float can hold (ints beyond a float too with
    ``exact_int``), else ValueError naming ``field``.  Bools and strings are refused."""
    bad = isinstance(value, (bool, str, bytes)) or value is None
    if not bad:
        try:
            float(value)
        except (TypeError, ValueError):
            bad = True
        except OverflowError:
            if not (exact_int and isinstance(value, numbers.Integral)):
                raise ValueError(f"{field}={value!r} is not allowed; it is too large for a float") from None
    if bad:
        raise ValueError(f"{field}={value!r} is not allowed; it must be a number")
    return value


def _digits(digits) -> int:
    if isinstance(digits, bool) or not isinstance(digits, numbers.Integral) or not 0 <= digits <= MAX_DIGITS:
        raise ValueError(f"digits={digits!r} is not allowed; allowed: an integer in 0..MAX_DIGITS={MAX_DIGITS}")
    return int(digits)


def _text(field: str, value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field}={value!r} is not allowed; it must be a string")
    return value


def _flag(field: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} is not allowed; it must be True or False")
    return value


def fmt_gb(nbytes: float, digits: int = 2) -> str:
    """Format bytes in decimal gigabytes: ``fmt_gb(14e9)`` → ``'14.00 GB'`` (GB = 1e9 B).

    Raises:
        ValueError: ``nbytes`` not a number, ``digits`` not an integer in 0..:data:`MAX_DIGITS`.
    """
    nbytes, digits = _number("nbytes", nbytes), _digits(digits)
    return f"{nbytes / GB:.{digits}f} GB"


def fmt_gib(nbytes: float, digits: int = 2) -> str:
    """Format bytes in binary gibibytes: ``fmt_gib(14e9)`` → ``'13.04 GiB'`` (GiB = 2**30 B).

    Raises:
        ValueError: ``nbytes`` not a number, ``digits`` not an integer in 0..:data:`MAX_DIGITS`.
    """
    nbytes, digits = _number("nbytes", nbytes), _digits(digits)
    return f"{nbytes / GiB:.{digits}f} GiB"


_DEC = [("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB)]
_BIN = [("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)]


def fmt_bytes(nbytes: float, binary: bool = False, digits: int = 2) -> str:
    """Format a byte count with the largest fitting prefix, decimal (KB, MB, GB, TB) by default
    or binary (KiB … TiB) with ``binary=True``; below 1 KB/KiB it prints whole bytes; NaN →
    ``'nan B'``.

    Raises:
        ValueError: ``nbytes`` not a number, ``binary`` not a bool, ``digits`` not an integer in
            0..:data:`MAX_DIGITS`.
    """
    nbytes, binary, digits = _number("nbytes", nbytes), _flag("binary", binary), _digits(digits)
    if math.isnan(float(nbytes)):
        return "nan B"
    for unit, size in (_BIN if binary else _DEC):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.{digits}f} {unit}"
    return f"{int(nbytes)} B"


def fmt_si(value: float, unit: str, digits: int = 3) -> str:
    """Format an analytic quantity with an SI prefix, e.g. ``fmt_si(4.18e-3, 's')`` → ``'4.18 ms'``.

    ``digits`` significant digits, never in scientific notation: a value that rounds up to 1000
    of a prefix moves to the next one (``fmt_si(999.7e-3, 's')`` → ``'1 s'``, not ``'1e+03 ms'``).

    Raises:
        ValueError: ``value`` not a number, ``unit`` not a string, ``digits`` not an integer in
            0..:data:`MAX_DIGITS`.
    """
    value, unit, digits = _number("value", value), _text("unit", unit), _digits(digits)
    if value == 0 or not math.isfinite(value):
        return f"{value} {unit}"
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""),
                (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")]
    for i, (scale, p) in enumerate(prefixes):
        if abs(value) >= scale or i == len(prefixes) - 1:
            x = float(f"{value / scale:.{digits}g}")
            if abs(x) >= 1000 and i > 0:
                scale, p = prefixes[i - 1]
            return f"{fmt_num(value / scale, digits, separators=False)} {p}{unit}"
    raise AssertionError("unreachable")


def fmt_num(value: float, digits: int = 4, separators: bool = True) -> str:
    """A plain number for tables and calculators: ``digits`` significant digits (all of the integer
    part when it is longer), thousands separators, trailing zeros dropped, never scientific
    notation.  ``fmt_num(18863.496)`` → ``'18,863'``, ``fmt_num(0.43383)`` → ``'0.4338'``,
    ``fmt_num(3.0)`` → ``'3'``, ``fmt_num(1.23e-5)`` → ``'0.0000123'``; ``nan`` → ``'n/a'``,
    ``±inf`` → ``'∞'`` / ``'-∞'``.  Integers print exactly (``fmt_num(671026419200)`` →
    ``'671,026,419,200'``).

    Raises:
        ValueError: ``value`` not a number, ``digits`` not an integer in 0..:data:`MAX_DIGITS`,
            ``separators`` not a bool.
    """
    value, digits = _number("value", value, exact_int=True), _digits(digits)
    comma = "," if _flag("separators", separators) else ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:{comma}}"
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:{comma}.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def fmt_time(seconds: float, digits: int = 3) -> str:
    """A duration with the unit that reads best: ``fmt_time(0.005186)`` → ``'5.19 ms'``,
    ``fmt_time(4.2e-5)`` → ``'42 µs'``, ``fmt_time(2.5)`` → ``'2.5 s'``, ``fmt_time(3600)`` →
    ``'3,600 s'``; ``0`` → ``'0 s'``; ``inf`` → ``'never'`` (a rate of zero: the event never
    happens); ``nan`` → ``'n/a'``.  Never scientific notation.

    Raises:
        ValueError: ``seconds`` not a number, ``digits`` not an integer in 0..:data:`MAX_DIGITS`.
    """
    seconds = float(_number("seconds", seconds))
    _digits(digits)
    if math.isnan(seconds):
        return "n/a"
    if math.isinf(seconds):
        return "never" if seconds > 0 else "-∞ s"
    if seconds == 0:
        return "0 s"
    if abs(seconds) >= 1:
        return f"{fmt_num(seconds, digits)} s"
    return fmt_si(seconds, "s", digits)


_MEASURED = [0]   # how many measured values this process has formatted (see measured_count)


def measured_count() -> int:
    """How many values :func:`fmt_measured` has formatted in this process: a cell that changes
    it printed a measured value, and ``llm_dataflow.measure.stamp_measuring_cells`` puts the
    run stamp under it."""
    return _MEASURED[0]


#: The mark of a measured value in a table whose column header says "measured" once
#: (:func:`fmt_measured` with ``mark=True``): ``'41.2 GB/s†'``.
MEASURED_MARK = "\u2020"


def fmt_measured(value: float, unit: str, digits: int = 3, *, modelled: bool = False, mark: bool = False) -> str:
    """Format a *measured* number as ``'<value> <unit> (measured)'``.

    Every number that depends on the reader's machine goes through this function, so that one
    regular expression in ``tests/nbval_sanitize.cfg`` masks it when nbval compares saved
    outputs, while analytic numbers stay compared exactly.  ``modelled=True`` tags a number the
    model computes *from* measured ones but that nothing measured (an overlap that was not run,
    the rate a table read would need): ``'<value> <unit> (modelled from measured)'``.
    ``mark=True`` is for a table cell whose column header says "(measured)" once: the value
    carries only :data:`MEASURED_MARK`, ``'41.2 GB/s†'`` (``unit`` may be ``""``: ``'41.2†'``),
    which the sanitizer masks the same way.

    Raises:
        ValueError: ``value`` not a number, ``unit`` not a string, ``digits`` not an integer in
            0..:data:`MAX_DIGITS`; ``mark`` together with ``modelled``.
    """
    value, unit, digits = _number("value", value), _text("unit", unit), _digits(digits)
    if mark and modelled:
        raise ValueError("mark=True with modelled=True is not allowed: a modelled value is tagged in words")
    _MEASURED[0] += 1
    if mark:
        text = "nan" if not math.isfinite(value) else f"{value:.{digits}g}"
        return f"{text} {unit}{MEASURED_MARK}" if unit else f"{text}{MEASURED_MARK}"
    tag = "(modelled from measured)" if modelled else "(measured)"
    if not math.isfinite(value):
        return f"nan {unit} {tag}"
    return f"{value:.{digits}g} {unit} {tag}".replace("  ", " ")


class Overflow(ValueError):
    """A count too large for a float (raised by :func:`no_overflow`; a ValueError)."""


def _short(v) -> str:
    """``repr(v)``, but an int of more than 20 digits as ``~10**k``."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**20:
        return f"{'-' if v < 0 else ''}~10**{len(str(abs(v))) - 1}"
    return repr(v)


def no_overflow(*fields: str, finite: bool = True):
    """Decorator: an ``OverflowError`` inside the calculator (an exact int count beyond a float's
    range, e.g. ``batch=10**400``), or (with ``finite``) a float result that overflowed to
    ``inf``, becomes a ValueError naming ``fields`` with their values.  The outermost decorated
    calculator names its own parameters."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                out = fn(*args, **kwargs)
                if not (finite and isinstance(out, float) and not math.isfinite(out)):
                    return out
            except (OverflowError, Overflow):
                pass
            import inspect
            try:
                bound = inspect.signature(fn).bind(*args, **kwargs)
                bound.apply_defaults()
                shown = ", ".join(f"{f}={_short(bound.arguments[f])}" for f in fields)
            except TypeError:
                shown = ", ".join(fields)
            raise Overflow(f"{shown}: too large, the result overflows a float") from None
        return wrapper
    return deco
