"""Calculators: one helper that turns an analytic function into an interactive view.

``calculator(fn, controls)`` evaluates ``fn(**params)`` — a function of the package returning a
dict of named outputs — and shows controls plus an output table.

* In a live kernel it is an ipywidgets view whose callback only updates widget values (never
  prints, so nbval sees no stray output).
* On the web page (no kernel) the same output shows a self-contained Vega-Lite view: at call time
  the package evaluates ``fn`` over the whole control grid, and the page's sliders and dropdowns
  (Vega-Lite parameters) select rows of that precomputed table.  The numbers are the package's
  own, formatted exactly as in the widget's table; no formula is re-implemented in JavaScript.

The display bundle carries both views: ``application/vnd.jupyter.widget-view+json`` (chosen by
JupyterLab / Notebook, which run the kernel) and ``text/html`` (chosen by the book, whose
``_config.yml`` ranks text/html first for the html builder).  The HTML is deterministic (its
element id is a hash of its content) so strict nbval can compare it.  Vega, Vega-Lite and
vega-embed are loaded from the site's ``_vendor/`` folder (``window.LDF_VEGA`` overrides; outside
the book, from the jsDelivr CDN at the versions pinned in ``web/package.json``).
"""
from __future__ import annotations

import hashlib
import html
import itertools
import json
import math

import numpy as np

__all__ = ["calculator", "calculator_html", "hosted_install_cell"]

# Versions of web/package.json; used only where no book page tells the view where Vega lives.
_CDN = {"vega": "https://cdn.jsdelivr.net/npm/vega@6.4.0/build/vega.min",
        "vega-lite": "https://cdn.jsdelivr.net/npm/vega-lite@6.5.0/build/vega-lite.min",
        "vega-embed": "https://cdn.jsdelivr.net/npm/vega-embed@7.3.0/build/vega-embed.min"}
MAX_STATIC_BYTES = 300_000   # budget of one calculator's static view (issue 9: < 300 KB)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _num(s: str):
    """The number a formatted value shows ("1,024" → 1024.0, "50.0%" → 50.0), or None.

    The page's bar chart parses the shown strings with the same rule (see ``_EXPR_NUM``).
    """
    try:
        x = float(s.replace(",", "").replace("%", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _table(result: dict) -> str:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td><b>{html.escape(_fmt(v))}</b></td></tr>"
                   for k, v in result.items())
    return f"<table class='ldf-calc'>{rows}</table>"


def _validate(controls: dict, max_rows: int) -> int:
    if not controls:
        raise ValueError("controls is empty; give at least one {param: [values]}")
    n = 1
    for k, vals in controls.items():
        if not len(vals):
            raise ValueError(f"controls[{k!r}] is empty; give at least one value")
        n *= len(vals)
    if n > max_rows:
        raise ValueError(f"the grid has {n} settings; at most max_rows={max_rows} are allowed")
    return n


def _is_numeric(vals) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def _evaluate(fn, controls: dict):
    """Outputs of ``fn`` over the grid by position: (names, values), str arrays of shape grid + (m,).

    Row j holds the j-th item of each result dict (its key and its formatted value), so a key
    that depends on a control (e.g. ``f"share of {hw} memory"``) is one row whose name changes.
    """
    keys = list(controls)
    shape = tuple(len(controls[k]) for k in keys)
    results = []
    for combo in itertools.product(*(controls[k] for k in keys)):
        try:
            r = [(str(kk), _fmt(v)) for kk, v in fn(**dict(zip(keys, combo))).items()]
        except Exception as e:  # a setting the function rejects shows its error
            r = [("error", f"{type(e).__name__}: {e}")]
        results.append(r)
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


def _spec(fn, controls: dict, title: str) -> dict:
    keys = list(controls)
    names, table = _evaluate(fn, controls)
    m = table.shape[-1]
    tables, strides, ntables, nstrides, maxima = [], [], [], [], []
    for j in range(m):
        flat, st = _reduced(table[..., j])
        tables.append(flat)
        strides.append(st)
        flat_n, st_n = _reduced(names[..., j])
        ntables.append(flat_n)
        nstrides.append(st_n)
        nums = [abs(x) for x in map(_num, flat) if x is not None]
        maxima.append(max(nums) if nums and max(nums) > 0 else None)
    params, labels = [], []
    for a, k in enumerate(keys):
        vals = list(controls[k])
        labels.append([_fmt(v) for v in vals])
        if _is_numeric(vals) and len(vals) > 1:
            # A slider over the index: list values need not be evenly spaced; the table's first
            # rows show the value the index stands for.
            bind = {"input": "range", "min": 0, "max": len(vals) - 1, "step": 1, "name": f"{k} "}
        else:
            bind = {"input": "select", "options": list(range(len(vals))),
                    "labels": [_fmt(v) for v in vals], "name": f"{k} "}
        params.append({"name": f"p{a}", "value": 0, "bind": bind})
    def index(stride: str) -> str:
        return " + ".join(f"toNumber(p{a}) * {stride}[datum.j][{a}]" for a in range(len(keys)))

    rows = ([{"r": a, "c": 1, "j": a, "n": f"{k} ="} for a, k in enumerate(keys)]
            + [{"r": len(keys) + j, "c": 0, "j": j} for j in range(m)])
    pick = " : ".join(f"datum.j == {a} ? ldf_c[{a}][toNumber(p{a})]" for a in range(len(keys)))
    body = {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        # Which package function and settings produced the table: the browser test recomputes them.
        "usermeta": {"fn": f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}",
                     "controls": {k: [v if isinstance(v, (str, int, float, bool)) else str(v)
                                      for v in controls[k]] for k in keys}},
        "description": (title + ": " if title else "") + "calculator of the llm_dataflow package; "
                       "the controls select precomputed results",
        "title": {"text": title, "subtitle": "bar: the value / its largest over all settings",
                  "subtitleColor": "#555", "subtitleFontSize": 11},
        "params": params + [{"name": "ldf_t", "value": tables}, {"name": "ldf_s", "value": strides},
                            {"name": "ldf_c", "value": labels}, {"name": "ldf_x", "value": maxima},
                            {"name": "ldf_n", "value": ntables}, {"name": "ldf_ns", "value": nstrides}],
        "data": {"values": rows},
        "transform": [
            {"calculate": f"datum.c == 1 ? datum.n : ldf_n[datum.j][{index('ldf_ns')}]", "as": "n"},
            {"calculate": f"datum.c == 1 ? ({pick} : '') : ldf_t[datum.j][{index('ldf_s')}]", "as": "s"},
            {"calculate": _EXPR_NUM, "as": "v"},
            {"calculate": "datum.c == 1 || !isValid(ldf_x[datum.j]) || !isValid(datum.v) ? 0 : "
                          "max(0, min(1, abs(datum.v) / ldf_x[datum.j]))", "as": "f"},
        ],
        "width": 280,
        "height": {"step": 20},
        "encoding": {"y": {"field": "n", "type": "nominal", "sort": {"field": "r", "op": "min", "order": "ascending"}, "title": None,
                           "axis": {"labelLimit": 320, "labelFontSize": 12, "domain": False,
                                    "ticks": False}}},
        "layer": [
            {"mark": {"type": "bar", "color": "#c6dbef", "height": {"band": 0.8}},
             "encoding": {"x": {"field": "f", "type": "quantitative", "title": None,
                                "scale": {"domain": [0, 1]}, "axis": None}}},
            {"name": "values",
             "mark": {"type": "text", "align": "left", "dx": 4, "fontSize": 12, "color": "#111"},
             "encoding": {"x": {"datum": 0, "type": "quantitative"}, "text": {"field": "s"},
                          "color": {"condition": {"test": "datum.c == 1", "value": "#555"},
                                    "value": "#000"}}},
        ],
        "config": {"background": "white", "view": {"stroke": None},
                   "title": {"anchor": "start", "color": "#111"},
                   "axis": {"labelColor": "#111", "grid": False}},
    }
    return body


# Vega expression: the number a shown string means (same rule as _num), NaN when it is no number.
_EXPR_NUM = "datum.c == 1 ? null : toNumber(replace(replace(datum.s, regexp(',', 'g'), ''), '%', ''))"

_TEMPLATE = """<div class="ldf-calc-card" role="figure" aria-label="{aria}" style="display:block;\
background:#fff;color:#111;padding:6px 8px;margin:4px 0;border:1px solid #ccc;border-radius:4px;\
overflow-x:auto;max-width:100%;font:13px sans-serif"><div class="ldf-calc-static" id="{id}">\
<noscript>This calculator needs JavaScript.</noscript></div></div>
<style>#{id} .vega-bind{{margin:2px 0}} #{id} .vega-bind-name{{display:inline-block;min-width:10em}}\
 #{id} .vega-bind input[type=range]+span{{display:none}} #{id} select{{font:inherit}}</style>
<script>
(function () {{
  var id = "{id}", spec = {spec};
  var V = window.LDF_VEGA, root = document.documentElement.getAttribute("data-content_root");
  if (!V) {{
    V = root !== null
      ? {{"vega": root + "_vendor/vega/vega.min", "vega-lite": root + "_vendor/vega-lite/vega-lite.min",
          "vega-embed": root + "_vendor/vega-embed/vega-embed.min"}}
      : {cdn};
  }}
  function show(vegaEmbed) {{
    var el = document.getElementById(id);
    vegaEmbed(el, spec, {{"renderer": "svg", "actions": false, "mode": "vega-lite"}})
      .then(function (res) {{ el.ldfView = res.view; el.setAttribute("data-ldf-ready", "1"); }})
      .catch(function (err) {{ el.textContent = "calculator failed to load: " + err; }});
  }}
  if (window.vegaEmbed) {{ show(window.vegaEmbed); return; }}
  if (typeof window.define === "function" && window.define.amd && typeof window.require === "function") {{
    window.require.config({{"paths": V}});
    window.require(["vega-embed"], show);
    return;
  }}
  if (!window.ldfVegaLoading) {{
    window.ldfVegaLoading = ["vega", "vega-lite", "vega-embed"].reduce(function (p, name) {{
      return p.then(function () {{ return new Promise(function (ok, fail) {{
        var s = document.createElement("script");
        s.src = V[name] + ".js"; s.onload = ok; s.onerror = fail; document.head.appendChild(s);
      }}); }});
    }}, Promise.resolve());
  }}
  window.ldfVegaLoading.then(function () {{ show(window.vegaEmbed); }});
}})();
</script>"""


def calculator_html(fn, controls: dict, *, title: str = "", max_rows: int = 5000) -> str:
    """The self-contained static view of a calculator: HTML + a Vega-Lite spec with the whole grid.

    ``fn`` is evaluated at every setting of ``controls`` (row-major); each output column keeps
    only the control axes it depends on, so a grid of thousands of settings stays small.  A
    setting for which ``fn`` raises shows ``"error: <Type>: <message>"``.

    Args:
        fn, controls, title, max_rows: as for :func:`calculator`.

    Returns:
        HTML text (a ``div`` and an inline script, no external file except Vega's three
        libraries, loaded as described in the module docstring).  Deterministic: the same inputs
        give the same bytes.

    Raises:
        ValueError: as :func:`calculator`; or the view exceeds ``MAX_STATIC_BYTES`` (300,000 bytes).
    """
    _validate(controls, max_rows)
    spec = json.dumps(_spec(fn, controls, title), separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    spec = spec.replace("</", "<\\/")  # never close the script element from inside a string
    digest = hashlib.sha1(spec.encode()).hexdigest()[:12]
    out = _TEMPLATE.format(id=f"ldf-calc-{digest}", spec=spec,
                           aria=html.escape(title or "calculator", quote=True),
                           cdn=json.dumps(_CDN, sort_keys=True))
    if len(out.encode()) > MAX_STATIC_BYTES:
        raise ValueError(f"the static view of this calculator is {len(out.encode()):,} bytes; at most "
                         f"MAX_STATIC_BYTES={MAX_STATIC_BYTES:,} are allowed: use fewer control values")
    return out


def _box_class():
    import ipywidgets as w

    class CalculatorBox(w.VBox):
        """A ``VBox`` whose display bundle also carries the static view as ``text/html``."""

        _ldf_html = ""

        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs)
            if data is not None and self._ldf_html:
                data = dict(data)
                data["text/html"] = self._ldf_html
            return data

    return CalculatorBox


_BOX = None


def calculator(fn, controls: dict, *, title: str = "", max_rows: int = 5000):
    """An interactive calculator over a finite grid of parameter values.

    Args:
        fn: ``fn(**params) -> dict[str, int | float | str]``; the package's own calculator.
        controls: ``{param: [value, ...]}``; each list becomes a dropdown (strings) or a
            selection slider (numbers).  The first value is the initial setting.
        title: a heading shown above the controls.
        max_rows: the largest allowed grid (product of the list lengths).

    Returns:
        An ipywidgets ``VBox`` (a subclass).  Displayed, its bundle holds the widget view (live
        kernel) and, as ``text/html``, the static view of :func:`calculator_html` (the web book).
        ``fn`` is evaluated over the whole grid at call time, so keep it analytic (µs per call).

    Raises:
        ValueError: empty controls, an empty value list, a grid larger than ``max_rows``, or a
            static view larger than ``MAX_STATIC_BYTES``.
    """
    import ipywidgets as w

    global _BOX
    _validate(controls, max_rows)
    static = calculator_html(fn, controls, title=title, max_rows=max_rows)
    widgets = {}
    for k, vals in controls.items():
        vals = list(vals)
        if _is_numeric(vals):
            widgets[k] = w.SelectionSlider(options=vals, value=vals[0], description=k,
                                           continuous_update=False, style={"description_width": "initial"})
        else:
            widgets[k] = w.Dropdown(options=vals, value=vals[0], description=k,
                                    style={"description_width": "initial"})
    out = w.HTML()

    def update(*_):
        out.value = _table(fn(**{k: wd.value for k, wd in widgets.items()}))

    for wd in widgets.values():
        wd.observe(update, names="value")
    update()
    head = [w.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    if _BOX is None:
        _BOX = _box_class()
    box = _BOX(head + list(widgets.values()) + [out])
    box._ldf_html = static
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
