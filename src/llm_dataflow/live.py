"""Calculators: one helper that turns an analytic function into an interactive view.

``calculator(fn, controls)`` evaluates ``fn(**params)`` — a function of the package returning a
dict of named outputs — and shows controls plus an output table.  In a live kernel it is an
ipywidgets view whose callback only updates widget values (never prints, so nbval sees no
stray output).
"""
from __future__ import annotations

import html
import itertools

__all__ = ["calculator"]


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _table(result: dict) -> str:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td><b>{html.escape(_fmt(v))}</b></td></tr>"
                   for k, v in result.items())
    return f"<table class='ldf-calc'>{rows}</table>"


def calculator(fn, controls: dict, *, title: str = "", max_rows: int = 5000):
    """An interactive calculator over a finite grid of parameter values.

    Args:
        fn: ``fn(**params) -> dict[str, int | float | str]``; the package's own calculator.
        controls: ``{param: [value, ...]}``; each list becomes a dropdown (strings) or a
            selection slider (numbers).  The first value is the initial setting.
        title: a heading shown above the controls.
        max_rows: the largest allowed grid (product of the list lengths).

    Returns:
        An ipywidgets ``VBox``.

    Raises:
        ValueError: empty controls, an empty value list, or a grid larger than ``max_rows``.
    """
    import ipywidgets as w

    if not controls:
        raise ValueError("controls is empty; give at least one {param: [values]}")
    n = 1
    for k, vals in controls.items():
        if not len(vals):
            raise ValueError(f"controls[{k!r}] is empty; give at least one value")
        n *= len(vals)
    if n > max_rows:
        raise ValueError(f"the grid has {n} settings; at most max_rows={max_rows} are allowed")
    widgets = {}
    for k, vals in controls.items():
        vals = list(vals)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
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
    return w.VBox(head + list(widgets.values()) + [out])


def grid(controls: dict):
    """All settings of ``controls`` as a list of dicts (row-major in the order given)."""
    keys = list(controls)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(controls[k] for k in keys))]
