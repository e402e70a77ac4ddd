"""Calculators: one helper that turns an analytic function into an interactive view.

``calculator(fn, controls)`` evaluates ``fn(**params)`` — a function of the package returning a
dict of named outputs — and shows controls plus an output table.

* In a live kernel it is an ipywidgets view whose callback only updates widget values (never
  prints, so nbval sees no stray output).  It evaluates ``fn`` only at the settings the reader
  picks (plus a few corner settings that fix the number of table rows).
* On the web page (no kernel) the same output shows a self-contained Vega-Lite view: the package
  evaluates ``fn`` over the whole control grid, and the page's sliders and dropdowns (Vega-Lite
  parameters) select rows of that precomputed table.  The numbers are the package's own,
  formatted exactly as in the widget's table (:func:`calculator_rows`); no formula is
  re-implemented in JavaScript.  The grid is computed only where the page is built:
  ``LDF_STATIC_VIEWS=1`` (set by ``tools/execute_notebooks.py``) or any kernel not started by a
  Jupyter server (nbclient, nbval); a kernel of JupyterLab / Notebook / JupyterHub
  (``JPY_SESSION_NAME`` set) or Colab skips it unless ``LDF_STATIC_VIEWS=1``
  (``LDF_STATIC_VIEWS=0`` skips it everywhere).  See :func:`static_views_enabled`.

The display bundle carries ``application/vnd.jupyter.widget-view+json`` (chosen by JupyterLab /
Notebook for outputs of this session), ``text/html`` and ``text/plain``.  The HTML is a card
holding a plain table of the default setting — what JupyterLab shows for a notebook it does not
trust yet (its sanitizer keeps tables, drops scripts), and what a page without JavaScript shows —
and, where the grid was computed, the script that replaces that table with the Vega-Lite view
(chosen by the book, whose ``_config.yml`` ranks text/html first for the html builder).  The HTML
is deterministic (its element id is a hash of its content) so strict nbval can compare it.
Vega, Vega-Lite and vega-embed are loaded from the site's ``_vendor/`` folder
(``window.LDF_VEGA`` overrides; outside the book, from the jsDelivr CDN at the versions pinned in
``web/package.json``).

Controls: numeric values become a slider in ascending order; the first value listed is the
initial setting (``"tp": [8, 1, 2, 4, 16]`` is a slider 1 … 16 starting at 8).  Values: strings
as given; integers exactly with thousands separators; a float whose name ends in a time or byte
unit (``"step (ms)"``, ``"weights (GB)"``) is shown with the unit that reads best
(``units.fmt_time`` / ``units.fmt_bytes``; the unit moves from the name into the value); other
floats through ``units.fmt_num``.  Never scientific notation; an infinite time reads "never".
"""
from __future__ import annotations

import hashlib
import html
import itertools
import json
import math
import numbers
import os
import re
import sys
from pathlib import Path

import numpy as np

from .core.units import fmt_bytes, fmt_num, fmt_time

__all__ = ["calculator", "calculator_html", "calculator_rows", "static_views_enabled",
           "hosted_install_cell", "card_messages", "translate_card", "value_template"]

# Versions of web/package.json; used only where no book page tells the view where Vega lives.
_CDN = {"vega": "https://cdn.jsdelivr.net/npm/vega@6.4.0/build/vega.min",
        "vega-lite": "https://cdn.jsdelivr.net/npm/vega-lite@6.5.0/build/vega-lite.min",
        "vega-embed": "https://cdn.jsdelivr.net/npm/vega-embed@7.3.0/build/vega-embed.min"}
MAX_STATIC_BYTES = 300_000   # budget of one calculator's static view (issue 9: < 300 KB)
ENV_STATIC = "LDF_STATIC_VIEWS"

# A float output whose name ends in "(<unit>)": shown in the unit that reads best.
_NAME_UNIT = re.compile(r"^(?P<name>.*\S)\s*\((?P<unit>[^()]+)\)$")
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
_BYTE_UNITS = {"B": (1, False), "bytes": (1, False), "KB": (1e3, False), "MB": (1e6, False),
               "GB": (1e9, False), "TB": (1e12, False), "KiB": (2**10, True), "MiB": (2**20, True),
               "GiB": (2**30, True), "TiB": (2**40, True)}

# The number a shown string starts with, and the unit right after it (commas removed first).
# The page's bar chart applies the same pattern in Vega (see _spec), so Python and page agree.
_NUM_RE = r"^\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*(\S*)[\s\S]*$"
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "m": 1e-3, "µ": 1e-6, "u": 1e-6, "n": 1e-9, "p": 1e-12,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_BASE_UNITS = ("s", "B", "FLOP", "FLOP/s", "B/s", "W", "Hz")


def static_views_enabled() -> bool:
    """Whether :func:`calculator` computes the whole grid for the web page's static view.

    ``LDF_STATIC_VIEWS=1`` / ``0`` decides; unset, the grid is computed except in a kernel a
    Jupyter server started for a reader (``JPY_SESSION_NAME`` is set by jupyter_server) or in
    Colab (``google.colab`` imported): there the reader asks for one setting at a time.

    Raises:
        ValueError: ``LDF_STATIC_VIEWS`` is set to something other than ``0`` or ``1``.
    """
    v = os.environ.get(ENV_STATIC, "").strip()
    if v not in ("", "0", "1"):
        raise ValueError(f"{ENV_STATIC}={v!r} is not allowed; use 1 (compute the static view) or 0")
    if v:
        return v == "1"
    return not (os.environ.get("JPY_SESSION_NAME") or "google.colab" in sys.modules)


def _label(v) -> str:
    """A control value as the slider / dropdown shows it."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    if isinstance(v, numbers.Real):
        return fmt_num(float(v))
    return str(v)


def _fmt(v, name: str = "") -> str:
    """The text a calculator shows for output value ``v`` (of an output called ``name``)."""
    return _row(name, v)[1]


def _row(name: str, v) -> tuple[str, str]:
    name = str(name)
    if isinstance(v, (bool, np.bool_)):
        return name, "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return name, f"{int(v):,}"        # exact counts: bytes, tokens, parameters
    if isinstance(v, numbers.Real):
        x = float(v)
        m = _NAME_UNIT.match(name)
        unit = m.group("unit").strip() if m else ""
        if unit in _TIME_UNITS:
            return m.group("name"), fmt_time(x * _TIME_UNITS[unit])
        if unit in _BYTE_UNITS and math.isfinite(x):
            scale, binary = _BYTE_UNITS[unit]
            return m.group("name"), fmt_bytes(x * scale, binary=binary)
        return name, fmt_num(x)
    return name, str(v)


def calculator_rows(result: dict) -> list[tuple[str, str]]:
    """``[(name, shown text), ...]`` of one result of a calculator function, in its order.

    The widget's table, the static view and its no-script table all show exactly these rows
    (see the module docstring for the formatting rules).
    """
    return [_row(k, v) for k, v in result.items()]


def _num(s: str):
    """The number a shown string starts with, in its unit's base ("6.48 ms" → 0.00648,
    "1,024" → 1024.0, "50.0%" → 50.0, "yes" → None).  The page's bars parse the same way."""
    m = re.match(_NUM_RE, s.replace(",", ""))
    if not m:
        return None
    x = float(m.group(1)) * _unit_scale(m.group(2))
    return x if math.isfinite(x) else None


def _unit_scale(unit: str) -> float:
    for base in _BASE_UNITS:
        if unit.endswith(base) and unit[:len(unit) - len(base)] in _PREFIX:
            return _PREFIX[unit[:len(unit) - len(base)]]
    return 1.0


def _validate(controls: dict, max_rows: int) -> int:
    if not controls:
        raise ValueError("controls is empty; give at least one {param: [values]}")
    n = 1
    for k, vals in controls.items():
        if not len(vals):
            raise ValueError(f"controls[{k!r}] is empty; give at least one value")
        if len(set(map(repr, vals))) != len(vals):
            raise ValueError(f"controls[{k!r}]={list(vals)!r} repeats a value; list each value once")
        n *= len(vals)
    if n > max_rows:
        raise ValueError(f"the grid has {n} settings; at most max_rows={max_rows} are allowed")
    return n


def _is_numeric(vals) -> bool:
    return all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in vals)


def _ordered(controls: dict) -> dict:
    """{param: (values in control order, index of the initial value)}: numbers ascending (a
    slider), strings as given (a dropdown); the initial value is the first one listed."""
    out = {}
    for k, vals in controls.items():
        vals = list(vals)
        order = sorted(vals) if _is_numeric(vals) and len(vals) > 1 else vals
        out[k] = (order, order.index(vals[0]))
    return out


def _call(fn, params: dict) -> list[tuple[str, str]]:
    try:
        return calculator_rows(fn(**params))
    except Exception as e:  # a setting the function rejects shows its error
        return [("error", f"{type(e).__name__}: {e}")]


def _evaluate(fn, ordered: dict):
    """Outputs of ``fn`` over the grid by position: (names, values), str arrays of shape grid + (m,).

    Row j holds the j-th item of each result dict (its name and its shown value), so a name that
    depends on a control (e.g. ``f"share of {hw} memory"``) is one row whose name changes.
    """
    keys = list(ordered)
    shape = tuple(len(ordered[k][0]) for k in keys)
    results = [_call(fn, dict(zip(keys, combo)))
               for combo in itertools.product(*(ordered[k][0] for k in keys))]
    m = max(len(r) for r in results)
    # Padding rows get distinct blank names (a nominal axis merges equal names).
    names = np.array([[r[j][0] if j < len(r) else " " * (j + 1) for j in range(m)] for r in results],
                     dtype=object)
    values = np.array([[r[j][1] if j < len(r) else "" for j in range(m)] for r in results], dtype=object)
    return names.reshape(shape + (m,)), values.reshape(shape + (m,))


def _reduced(col: np.ndarray):
    """Drop the control axes ``col`` does not depend on (values equal along the whole axis).

    Dependence is tested one axis at a time; if a column is invariant along axes a and b
    separately it is invariant along both (change a, then b).  Returns (flat list, strides) with
    stride 0 for a dropped axis, so ``flat[sum(i_a * stride_a)]`` is the value at index (i_a).
    """
    keep = [a for a in range(col.ndim)
            if col.shape[a] > 1 and not np.all(col == np.take(col, [0], axis=a))]
    sub = col[tuple(slice(None) if a in keep else 0 for a in range(col.ndim))]
    strides, s = [0] * col.ndim, 1
    for a in reversed(keep):   # row-major over the kept axes
        strides[a] = s
        s *= col.shape[a]
    return [str(x) for x in np.asarray(sub).reshape(-1)], strides


def _dictionary(flat: list[str]) -> tuple[list, list[str]]:
    """``(coded, distinct)``: a row's shown strings as indices into its distinct strings when that
    is shorter in JSON (a verdict repeated over 3,200 settings, a long "fits: …" text), else the
    strings themselves and ``[]``.  The page reads ``isString(x) ? x : distinct[x]``."""
    distinct = list(dict.fromkeys(flat))
    pos = {v: i for i, v in enumerate(distinct)}
    coded = [pos[v] for v in flat]
    size = lambda x: len(json.dumps(x, separators=(",", ":"), ensure_ascii=False))  # noqa: E731
    if size(coded) + size(distinct) < size(flat):
        return coded, distinct
    return flat, []


_DESCRIPTION = "calculator of the llm_dataflow package; the controls select precomputed results"
_SUBTITLE = "bar: the value / its largest over all settings"


def _spec(fn, ordered: dict, title: str) -> dict:
    keys = list(ordered)
    names, table = _evaluate(fn, ordered)
    m = table.shape[-1]
    tables, dicts, strides, ntables, nstrides, maxima, units = [], [], [], [], [], [], {}
    for j in range(m):
        flat, st = _reduced(table[..., j])
        coded, uniq = _dictionary(flat)
        tables.append(coded)
        dicts.append(uniq)
        strides.append(st)
        flat_n, st_n = _reduced(names[..., j])
        ntables.append(flat_n)
        nstrides.append(st_n)
        nums = [abs(x) for x in map(_num, flat) if x is not None]
        maxima.append(max(nums) if nums and max(nums) > 0 else None)
        for s in flat:
            mt = re.match(_NUM_RE, s.replace(",", ""))
            if mt and _unit_scale(mt.group(2)) != 1.0:
                units[mt.group(2)] = _unit_scale(mt.group(2))
    params, labels = [], []
    for a, k in enumerate(keys):
        vals, first = ordered[k]
        labels.append([_label(v) for v in vals])
        if _is_numeric(vals) and len(vals) > 1:
            # A slider over the index (list values need not be evenly spaced); the page's script
            # writes the value the index stands for beside it.
            bind = {"input": "range", "min": 0, "max": len(vals) - 1, "step": 1, "name": f"{k} "}
        else:
            bind = {"input": "select", "options": list(range(len(vals))),
                    "labels": [_label(v) for v in vals], "name": f"{k} "}
        params.append({"name": f"p{a}", "value": first, "bind": bind})

    def index(stride: str) -> str:
        return " + ".join(f"toNumber(p{a}) * {stride}[datum.j][{a}]" for a in range(len(keys)))

    rows = ([{"r": a, "c": 1, "j": a, "n": f"{k} ="} for a, k in enumerate(keys)]
            + [{"r": len(keys) + j, "c": 0, "j": j} for j in range(m)])
    pick = " : ".join(f"datum.j == {a} ? ldf_c[{a}][toNumber(p{a})]" for a in range(len(keys)))
    body = {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        # Which package function and settings produced the table: the browser test recomputes
        # them.  Values in control order (sliders ascending); "initial" is the first setting.
        "usermeta": {"fn": f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}",
                     "controls": {k: [v if isinstance(v, (str, int, float, bool)) else str(v)
                                      for v in ordered[k][0]] for k in keys},
                     "initial": {k: ordered[k][1] for k in keys}},
        "description": (title + ": " if title else "") + _DESCRIPTION,
        "title": {"text": title, "subtitle": _SUBTITLE,
                  "subtitleFontSize": 11},
        "params": params + [{"name": "ldf_t", "value": tables}, {"name": "ldf_d", "value": dicts},
                            {"name": "ldf_s", "value": strides},
                            {"name": "ldf_c", "value": labels}, {"name": "ldf_x", "value": maxima},
                            {"name": "ldf_n", "value": ntables}, {"name": "ldf_ns", "value": nstrides},
                            {"name": "ldf_u", "value": dict(sorted(units.items()))},
                            {"name": "ldf_re", "value": _NUM_RE}],
        "data": {"values": rows},
        "transform": [
            {"calculate": f"datum.c == 1 ? datum.n : ldf_n[datum.j][{index('ldf_ns')}]", "as": "n"},
            {"calculate": f"datum.c == 1 ? '' : ldf_t[datum.j][{index('ldf_s')}]", "as": "k"},
            # a row stored as indices into its list of distinct strings (see _dictionary)
            {"calculate": f"datum.c == 1 ? ({pick} : '') : "
                          "isString(datum.k) ? datum.k : ldf_d[datum.j][datum.k]", "as": "s"},
            # the number a shown string means, in its unit's base (same rule as _num), or NaN
            {"calculate": "replace(datum.s, regexp(',', 'g'), '')", "as": "s2"},
            {"calculate": "datum.c == 1 || !test(regexp(ldf_re), datum.s2) ? NaN : "
                          "toNumber(replace(datum.s2, regexp(ldf_re), '$1')) * "
                          "(isValid(ldf_u[replace(datum.s2, regexp(ldf_re), '$2')]) ? "
                          "ldf_u[replace(datum.s2, regexp(ldf_re), '$2')] : 1)", "as": "v"},
            {"calculate": "datum.c == 1 || !isValid(ldf_x[datum.j]) || !isValid(datum.v) || isNaN(datum.v) ? 0 : "
                          "max(0, min(1, abs(datum.v) / ldf_x[datum.j]))", "as": "f"},
        ],
        "width": 280,
        "height": {"step": 20},
        "encoding": {"y": {"field": "n", "type": "nominal", "sort": {"field": "r", "op": "min", "order": "ascending"}, "title": None,
                           "axis": {"labelLimit": 320, "labelFontSize": 12, "domain": False,
                                    "ticks": False}}},
        "layer": [
            # one colour readable on light and dark pages (the text colour follows the page)
            {"mark": {"type": "bar", "color": "#4c78a8", "opacity": 0.35, "height": {"band": 0.8}},
             "encoding": {"x": {"field": "f", "type": "quantitative", "title": None,
                                "scale": {"domain": [0, 1]}, "axis": None}}},
            {"name": "values",
             "mark": {"type": "text", "align": "left", "dx": 4, "fontSize": 12},
             "encoding": {"x": {"datum": 0, "type": "quantitative"}, "text": {"field": "s"},
                          "opacity": {"condition": {"test": "datum.c == 1", "value": 0.75},
                                      "value": 1}}},
        ],
        "config": {"view": {"stroke": None}, "title": {"anchor": "start"},
                   "axis": {"grid": False}},
    }
    return body


# The card follows the page's light/dark theme (pydata-sphinx-theme's colour variables, with
# light fallbacks elsewhere): no background or border colour of its own that could stay light.
_CARD = ('<div class="ldf-calc-card" role="figure" aria-label="{aria}" style="display:block;'
         'color:inherit;padding:6px 8px;margin:4px 0;'
         'border:1px solid var(--pst-color-border,rgba(128,128,128,0.5));'
         'border-radius:4px;max-width:100%;box-sizing:border-box;font-size:13px;'
         'font-family:var(--pst-font-family-base,sans-serif)">'
         '<div class="ldf-calc-static" id="{id}">{table}</div></div>')

# The page's view (data/calculator_view.html): Vega-Lite, with renderer "none" (Vega draws
# nothing), binds the controls to the spec's parameters and evaluates its transforms; the script
# writes the rows Vega computed into an HTML table (text that wraps at any width, no sideways
# scrolling, read by screen readers) and the value each slider stands for into an <output> of its
# own (Vega's label beside a slider shows the slider's index, and only updates it on some events:
# it is hidden).  Controls are at least 44 px tall; on a narrow card each takes the whole width.
_VIEW = (Path(__file__).parent / "data" / "calculator_view.html").read_text(encoding="utf-8")


def _script(ident: str, spec: str) -> str:
    """The style and script of one card: ``spec`` is the card's JSON text (already escaped)."""
    view = _VIEW.replace("__ID__", ident).replace("__CDN__", json.dumps(_CDN, sort_keys=True))
    return "\n" + view.replace("__SPEC__", spec).rstrip("\n")


_NOTE = ("values at the initial setting: the controls need a running kernel (run this cell) "
         "or the web book")


def _static_table(title: str, ordered: dict, rows: list[tuple[str, str]], n_rows: int) -> str:
    """A plain HTML table of one setting (kept by JupyterLab's sanitizer: no script, no style
    element), padded to ``n_rows`` output rows so the layout does not jump between settings."""
    cell = 'style="padding:1px 12px 1px 0;text-align:left;vertical-align:top"'
    head = f"<caption style='text-align:left'><b>{html.escape(title)}</b></caption>" if title else ""
    ctl = "".join(f"<tr><td {cell}>{html.escape(str(k))} =</td><td {cell}>"
                  f"{html.escape(_label(vals[i]))}</td></tr>" for k, (vals, i) in ordered.items())
    rows = list(rows) + [("", "")] * (n_rows - len(rows))
    out = "".join(f"<tr><td {cell}>{html.escape(n) or '&nbsp;'}</td><td {cell}><b>{html.escape(v)}</b></td></tr>"
                  for n, v in rows)
    return (f"<table class='ldf-calc-table' style='border-collapse:collapse'>{head}{ctl}{out}</table>"
            f"<div class='ldf-calc-note' style='font-size:11px;opacity:0.75'>{html.escape(_NOTE)}</div>")


def _text_table(title: str, ordered: dict, rows: list[tuple[str, str]]) -> str:
    lines = [f"{k} = {_label(vals[i])}" for k, (vals, i) in ordered.items()] + [f"{n}: {v}" for n, v in rows]
    return "\n".join(([title] if title else []) + lines + [f"({_NOTE})"])


def _initial(ordered: dict) -> dict:
    return {k: vals[i] for k, (vals, i) in ordered.items()}


def _card(fn, ordered: dict, title: str, static: bool, n_rows: int | None = None) -> str:
    rows = _call(fn, _initial(ordered))
    aria = html.escape(title or "calculator", quote=True)
    if not static:
        table = _static_table(title, ordered, rows, max(n_rows or 0, len(rows)))
        digest = hashlib.sha1(table.encode()).hexdigest()[:12]
        return _CARD.format(id=f"ldf-calc-{digest}", table=table, aria=aria)
    body = _spec(fn, ordered, title)
    table = _static_table(title, ordered, rows, len(body["params"][len(ordered)]["value"]))
    # UTF-8 as is ("µs" is 3 bytes, not the 7 of an escaped "\u00b5s"); U+2028/2029 escaped for old JS parsers
    spec = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    spec = spec.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    spec = spec.replace("</", "<\\/")  # never close the script element from inside a string
    digest = hashlib.sha1(spec.encode()).hexdigest()[:12]
    ident = f"ldf-calc-{digest}"
    return (_CARD.format(id=ident, table=table, aria=aria)
            + _script(ident, spec))


def calculator_html(fn, controls: dict, *, title: str = "", max_rows: int = 5000) -> str:
    """The self-contained static view of a calculator: HTML + a Vega-Lite spec with the whole grid.

    ``fn`` is evaluated at every setting of ``controls`` (row-major, controls in slider order);
    each output column keeps only the control axes it depends on, so a grid of thousands of
    settings stays small.  A setting for which ``fn`` raises shows ``"error: <Type>: <message>"``.
    Every setting shows the same number of rows (shorter results are padded with blank rows).

    Args:
        fn, controls, title, max_rows: as for :func:`calculator`.

    Returns:
        HTML text: a card with a plain table of the initial setting (shown where scripts do not
        run) and an inline script that replaces it with the Vega-Lite view (no external file
        except Vega's three libraries, loaded as described in the module docstring).
        Deterministic: the same inputs give the same bytes.

    Raises:
        ValueError: as :func:`calculator`; or the view exceeds ``MAX_STATIC_BYTES`` (300,000 bytes).
    """
    _validate(controls, max_rows)
    out = _card(fn, _ordered(controls), title, static=True)
    if len(out.encode()) > MAX_STATIC_BYTES:
        raise ValueError(f"the static view of this calculator is {len(out.encode()):,} bytes; at most "
                         f"MAX_STATIC_BYTES={MAX_STATIC_BYTES:,} are allowed: use fewer control values")
    return out


# A card's parts that are labels (translated in the book's other editions), not values.
_SPEC_RE = re.compile(r'(var id = "[^"]*", spec = )(\{.*?\})(;\n  var V)', re.S)
_CAPTION_RE = re.compile(r"(<caption style='text-align:left'><b>)(.*?)(</b></caption>)")
_CONTROL_RE = re.compile(r"(<tr><td [^>]*>)([^<]*?)( =</td>)")
_ROWNAME_RE = re.compile(r"(<tr><td [^>]*>)([^<]+?)(</td><td [^>]*><b>)")
_ARIA_RE = re.compile(r'(role="figure" aria-label=")([^"]*)(")')
_NOTE_RE = re.compile(r"(<div class='ldf-calc-note'[^>]*>)([^<]*)(</div>)")
_VALUE_RE = re.compile(r"(<td [^>]*><b>)([^<]*)(</b></td>)")
# A number in a shown value, with its unit ("21.5 GB", "1,024", "6.48 ms", "50.0%"), but not
# the digits of a name ("bf16", "A100-SXM", "max_position_embeddings").
_VALUE_NUM = re.compile(r"(?<![A-Za-z_\d.\-])[-+]?\d[\d,]*(?:\.\d+)?"
                        r"(?:\s?(?:[kKMGTPµun]?(?:FLOP/s|FLOP|B/s|B|s|W|Hz)|ms|KiB|MiB|GiB|TiB|%|×)"
                        r"(?![A-Za-z]))?")
_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def value_template(text: str) -> tuple[str, list[str]] | None:
    """A calculator's shown value as words with numbered placeholders for its numbers, and the
    numbers: ``"fits: 21.5 GB of 80.0 GB per GPU"`` → ``("fits: {0} of {1} per GPU",
    ["21.5 GB", "80.0 GB"])``.  ``None`` when the value has no words to translate: a number, a
    name or code (``"bf16 / bf16"``, ``"gate_proj"``, ``"GQA"``), or an error text.

    A translated edition translates the template (:func:`card_messages`) and puts the same
    numbers back, in the order its placeholders say (:func:`translate_card`).
    """
    if "{" in text or "}" in text or re.match(r"^[A-Za-z]*(Error|Exception|Warning)\b", text):
        return None
    nums: list[str] = []

    def hole(m):
        nums.append(m.group(0))
        return "{%d}" % (len(nums) - 1)

    template = _VALUE_NUM.sub(hole, text)
    words = re.findall(r"[A-Za-z][A-Za-z0-9_*]*", _PLACEHOLDER.sub(" ", template))
    if not any(re.fullmatch(r"[A-Za-z][a-z]+", w) or w in ("YES", "NO") for w in words):
        return None
    return template, nums


def _fill(template: str, nums: list[str]) -> str:
    return _PLACEHOLDER.sub(lambda m: nums[int(m.group(1))] if int(m.group(1)) < len(nums)
                            else m.group(0), template)


def _spec_values(spec: dict) -> list[str]:
    """Every distinct shown value of a spec's output rows (see :func:`_dictionary`)."""
    params = {p["name"]: p["value"] for p in spec["params"] if "value" in p}
    out = []
    for col, distinct in zip(params.get("ldf_t", []), params.get("ldf_d", [])):
        out += [v for v in (distinct or col) if isinstance(v, str)]
    return out


def _card_spec(card: str):
    m = _SPEC_RE.search(card)
    return (m, json.loads(m.group(2))) if m else (None, None)


def _spec_labels(spec: dict) -> tuple[str, list[str], list[str]]:
    controls = [p["bind"]["name"].rstrip() for p in spec["params"] if "bind" in p]
    names = next(p["value"] for p in spec["params"] if p["name"] == "ldf_n")
    rows = [n for col in names for n in col if isinstance(n, str) and n]
    return spec["title"]["text"], controls, rows


def card_messages(card: str) -> list[str]:
    """The labels of a calculator card (the HTML of :func:`calculator_html` or of the widget's
    table) that a translated edition of the book translates, in order, each once: its title, the
    control names, the output row names, the card's fixed notes, and the words of its shown
    values as templates (:func:`value_template`: ``"fits: {0} of {1} per GPU"``, ``"yes"``).
    Numbers, units, option labels, names of code or config fields and error texts are not listed.

    Args:
        card: the HTML text of one card (must contain ``ldf-calc-card``).

    Raises:
        ValueError: ``card`` is not a calculator card.
    """
    if "ldf-calc-card" not in card:
        raise ValueError("card: not a calculator card of llm_dataflow.live (no 'ldf-calc-card' element)")
    msgs = [html.unescape(m.group(2)) for m in _CAPTION_RE.finditer(card)]
    msgs += [html.unescape(m.group(2)) for m in _CONTROL_RE.finditer(card)]
    msgs += [html.unescape(m.group(2)) for m in _ROWNAME_RE.finditer(card)
             if not m.group(2).endswith(" =") and m.group(2) != "&nbsp;"]
    _, spec = _card_spec(card)
    if spec is not None:
        title, controls, rows = _spec_labels(spec)
        msgs += [title, *controls, *rows, spec["title"]["subtitle"], _description(spec)]
    msgs += [html.unescape(m.group(2)) for m in _NOTE_RE.finditer(card)]
    # the words of the shown values ("fits: {0} of {1} per GPU", "never compute-bound", "yes")
    values = [html.unescape(m.group(2)) for m in _VALUE_RE.finditer(card)]
    values += _spec_values(spec) if spec is not None else []
    msgs += [t[0] for t in map(value_template, values) if t]
    return [m for m in dict.fromkeys(msgs) if m.strip()]


def _description(spec: dict) -> str:
    """The fixed part of a spec's description (after "<title>: ")."""
    title = spec["title"]["text"]
    d = spec["description"]
    return d[len(title) + 2:] if title and d.startswith(title + ": ") else d


def translate_card(card: str, translate) -> str:
    """``card`` with each label of :func:`card_messages` replaced by ``translate(label)``.

    A shown value whose template (:func:`value_template`) has a translation is written with
    the translated words and its own numbers.  The numbers, the control values and the page
    script are unchanged, so the translated card shows the same settings and results.  ``translate`` returns its argument when it has no
    translation (as ``gettext`` does).

    Raises:
        ValueError: ``card`` is not a calculator card.
    """
    messages = set(card_messages(card))

    def tr(text: str) -> str:
        return translate(text) if text in messages else text

    def tr_value(text: str) -> str:
        t = value_template(text)
        if not t or t[0] not in messages:
            return text
        done = translate(t[0])
        return text if done == t[0] else _fill(done, t[1])

    def sub_html(rx, text):
        return rx.sub(lambda m: m.group(1) + html.escape(tr(html.unescape(m.group(2))))
                      + m.group(3), text)

    out = sub_html(_CAPTION_RE, card)
    out = sub_html(_CONTROL_RE, out)
    out = _ROWNAME_RE.sub(lambda m: m.group(1) + (html.escape(tr(html.unescape(m.group(2))))
                                                  if not m.group(2).endswith(" =") else m.group(2))
                          + m.group(3), out)
    out = _NOTE_RE.sub(lambda m: m.group(1) + html.escape(tr(html.unescape(m.group(2))))
                       + m.group(3), out)
    out = _VALUE_RE.sub(lambda m: m.group(1) + html.escape(tr_value(html.unescape(m.group(2))))
                        + m.group(3), out)
    out = _ARIA_RE.sub(lambda m: m.group(1) + html.escape(tr(html.unescape(m.group(2))), quote=True)
                       + m.group(3), out)
    m, spec = _card_spec(out)
    if spec is not None:
        title, fixed = spec["title"]["text"], _description(spec)
        spec["title"]["text"], spec["title"]["subtitle"] = tr(title), tr(spec["title"]["subtitle"])
        spec["description"] = (tr(title) + ": " if title else "") + tr(fixed)
        for p in spec["params"]:
            if "bind" in p:
                p["bind"]["name"] = tr(p["bind"]["name"].rstrip()) + " "
            if p["name"] == "ldf_n":
                p["value"] = [[tr(n) if isinstance(n, str) else n for n in col] for col in p["value"]]
            if p["name"] in ("ldf_t", "ldf_d"):   # the shown values' words; numbers stay
                p["value"] = [[tr_value(v) if isinstance(v, str) else v for v in col] for col in p["value"]]
        for row in spec["data"]["values"]:
            if "n" in row:
                row["n"] = tr(row["n"][:-2]) + " ="
        text = json.dumps(spec, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("</", "<\\/")
        out = out[:m.start(2)] + text + out[m.end(2):]
    return out


def _box_class():
    import ipywidgets as w

    class CalculatorBox(w.VBox):
        """A ``VBox`` whose display bundle also carries the static view (``text/html``) and a
        readable ``text/plain``."""

        _ldf_html = ""
        _ldf_text = ""

        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs)
            if data is not None and self._ldf_html:
                data = dict(data)
                data["text/html"] = self._ldf_html
                data["text/plain"] = self._ldf_text
            return data

    return CalculatorBox


_BOX = None
_TABLE_STYLE = ("<table style='border-collapse:collapse;table-layout:fixed'>"
                "<colgroup><col style='width:22em'><col></colgroup>{}</table>")


def _widget_table(rows: list[tuple[str, str]], n_rows: int) -> str:
    rows = list(rows) + [("", "")] * (n_rows - len(rows))
    return _TABLE_STYLE.format("".join(
        f"<tr><td style='padding:1px 12px 1px 0'>{html.escape(n) or '&nbsp;'}</td>"
        f"<td><b>{html.escape(v) or '&nbsp;'}</b></td></tr>" for n, v in rows))


def _corner_rows(fn, ordered: dict) -> int:
    """Rows of the longest result among the initial setting and each control at its ends (the
    others initial): 1 + 2 × controls calls, so a live calculator's table does not jump."""
    base = _initial(ordered)
    settings = [base] + [{**base, k: vals[e]} for k, (vals, _) in ordered.items() for e in (0, -1)]
    return max(len(_call(fn, s)) for s in settings)


def calculator(fn, controls: dict, *, title: str = "", max_rows: int = 5000):
    """An interactive calculator over a finite grid of parameter values.

    Args:
        fn: ``fn(**params) -> dict[str, int | float | str]``; the package's own calculator.
        controls: ``{param: [value, ...]}``; a list of numbers becomes a selection slider in
            ascending order, a list of strings a dropdown in the order given.  The first value
            listed is the initial setting (``[8, 1, 2, 4, 16]``: a slider 1 … 16 set to 8).
        title: a heading shown above the controls.
        max_rows: the largest allowed grid (product of the list lengths).

    Returns:
        An ipywidgets ``VBox`` (a subclass).  Displayed, its bundle holds the widget view (live
        kernel), ``text/html`` (the card of :func:`calculator_html` where
        :func:`static_views_enabled`, else the same card with the initial setting's table only)
        and a ``text/plain`` table of the initial setting.  The widget evaluates ``fn`` at the
        setting the reader picks; keep ``fn`` analytic (ms per call at most).

    Raises:
        ValueError: empty controls, an empty value list or one that repeats a value, a grid
            larger than ``max_rows``, a static view larger than ``MAX_STATIC_BYTES``, or a bad
            ``LDF_STATIC_VIEWS``.
    """
    import ipywidgets as w

    global _BOX
    _validate(controls, max_rows)
    ordered = _ordered(controls)
    n_rows = _corner_rows(fn, ordered)
    if static_views_enabled():
        static = calculator_html(fn, controls, title=title, max_rows=max_rows)
    else:
        static = _card(fn, ordered, title, static=False, n_rows=n_rows)
    widgets = {}
    for k, (vals, first) in ordered.items():
        if _is_numeric(vals) and len(vals) > 1:
            widgets[k] = w.SelectionSlider(options=[(_label(v), v) for v in vals], value=vals[first],
                                           description=k, continuous_update=False, readout=True,
                                           style={"description_width": "10em"},
                                           layout=w.Layout(width="36em"))
        else:
            widgets[k] = w.Dropdown(options=[(_label(v), v) for v in vals], value=vals[first],
                                    description=k, style={"description_width": "10em"})
    out = w.HTML()
    shape = {"rows": n_rows}

    def update(*_):
        rows = _call(fn, {k: wd.value for k, wd in widgets.items()})
        shape["rows"] = max(shape["rows"], len(rows))   # grow once, never shrink: no jumps
        out.value = _widget_table(rows, shape["rows"])

    for wd in widgets.values():
        wd.observe(update, names="value")
    update()
    head = [w.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    if _BOX is None:
        _BOX = _box_class()
    box = _BOX(head + list(widgets.values()) + [out])
    box._ldf_html = static
    box._ldf_text = _text_table(title, ordered, _call(fn, _initial(ordered)))
    return box


def grid(controls: dict):
    """All settings of ``controls`` as a list of dicts (row-major in the order given)."""
    keys = list(controls)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(controls[k] for k in keys))]


_HOSTED_CELL = '''\
# Colab, Binder or a JupyterHub without this book's package: install it (nothing happens elsewhere).
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("llm_dataflow") is None and (
        "google.colab" in sys.modules or "BINDER_REQUEST" in os.environ
        or "JUPYTERHUB_API_URL" in os.environ):
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+{url}@{branch}"], check=True)'''


def hosted_install_cell(repo_url: str | None = None, branch: str | None = None,
                        config_path=None) -> str:
    """Source of a notebook's first cell that installs the package only in a hosted kernel.

    The cell does nothing (prints nothing) where ``llm_dataflow`` is importable — a local
    install, CI, nbval — and in Colab (``google.colab`` is imported), on Binder (``BINDER_REQUEST``)
    or on a JupyterHub (``JUPYTERHUB_API_URL``) without it runs ``pip install git+<repo>@<branch>``.
    The URL and branch default to ``repository.url`` / ``repository.branch`` of the book's
    ``_config.yml``, the one setting the launch buttons also use.  It cannot import the package
    (it is what installs it), so the cell is plain code; this function only writes it.

    Raises:
        ValueError: no URL given and none found in ``config_path``.
    """
    if repo_url is None or branch is None:
        import pathlib
        import re

        path = pathlib.Path(config_path) if config_path else pathlib.Path(__file__).resolve().parents[2] / "_config.yml"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        block = re.search(r"^repository:\s*\n((?:[ \t]+.*\n?)*)", text, re.M)
        found = dict(re.findall(r"^[ \t]+(url|branch):\s*([^\s#]+)", block.group(1), re.M)) if block else {}
        repo_url = repo_url or found.get("url")
        branch = branch or found.get("branch", "main")
    if not repo_url or not str(repo_url).startswith(("https://", "http://")):
        raise ValueError(f"repo_url={repo_url!r}; give the book's https repository URL "
                         "(repository.url in _config.yml)")
    return _HOSTED_CELL.format(url=str(repo_url).rstrip("/"), branch=branch)
