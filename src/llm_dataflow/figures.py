"""The book's figure style: vector figures whose text stays readable on a phone.

A notebook calls :func:`use_book_style` once, in its setup cell.  From then on every matplotlib
figure the inline backend shows is stored as SVG (``image/svg+xml``) instead of an 80-90 dpi PNG,
so it is sharp at any zoom and on any screen, and its text sizes are chosen for the narrowest
reader:

* matplotlib's SVG is in points (1 pt = 4/3 CSS px), so a figure ``w`` inches wide is
  ``96 w`` CSS px wide at its natural size: 614 px for the default 6.4 in, which fits the book's
  desktop column (~690 px) without scaling;
* on a 390 px phone the column is ~358 px, so the figure is drawn at 358/614 = 0.58 of its size
  and the smallest text, :data:`MIN_FONT_PT` = 11 pt (14.7 px), shows at ~8.6 px
  (``tests/test_browser.py`` checks every figure at both widths); a tap or click opens the
  figure alone at its natural size (``book/_ext/static/ldf.js``), where that text is 14.7 px
  and no text of a book figure is under 10 px (``test_figures_enlarge_on_a_phone``);
* text stays text (``svg.fonttype = "none"``): smaller files than outlined glyphs, selectable and
  searchable; the font list ends in the generic ``sans-serif``;
* the SVG carries no creation date and fixed element ids (``svg.hashsalt``): re-running a
  notebook gives the same bytes.

``BOOK_RC`` holds exactly what changes; everything else keeps matplotlib's defaults.
"""
from __future__ import annotations

__all__ = ["BOOK_RC", "MIN_FONT_PT", "use_book_style", "with_thousands"]

#: The smallest font size (pt) of the book's figures: tick labels and legends.
MIN_FONT_PT = 11.0

#: matplotlib rcParams the book sets (see the module docstring for why each).
BOOK_RC: dict = {
    "figure.figsize": (6.4, 4.0),        # inches: 614 x 384 CSS px at natural size
    "figure.dpi": 100,                   # only for raster fallbacks; SVG is resolution-free
    "savefig.dpi": 200,                  # a PNG someone saves by hand is 2x dense
    "font.size": MIN_FONT_PT,           # annotations and other free text
    "axes.titlesize": 13.0,
    "axes.labelsize": 12.0,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "legend.title_fontsize": MIN_FONT_PT,
    "figure.titlesize": 13.0,
    "legend.framealpha": 0.9,            # a legend over data stays readable
    "svg.fonttype": "none",              # text as <text>, not glyph outlines
    "svg.hashsalt": "llm_dataflow",      # deterministic ids in the SVG
}


def use_book_style(*, inline: bool = True) -> None:
    """Apply the book's figure style (``BOOK_RC``) and, inside IPython/Jupyter, show figures as SVG
    and tables' integers with thousands separators (:func:`with_thousands`).

    Args:
        inline: when True (default) and an IPython kernel is running, make the inline backend emit
            ``image/svg+xml`` only (no PNG), without a creation date, so the saved outputs are
            deterministic.  Outside IPython only the rcParams change.

    Returns:
        None.  Changes ``matplotlib.rcParams`` for the whole process (call
        ``matplotlib.rcdefaults()`` to undo).

    Raises:
        Nothing of its own; matplotlib must be installed (it is a dependency of the package).
    """
    import matplotlib

    if inline:
        try:
            from IPython import get_ipython
        except ImportError:   # no IPython: a plain script
            get_ipython = None
        shell = get_ipython() if get_ipython is not None else None
        if shell is not None and getattr(shell, "display_formatter", None) is not None:
            # Import pyplot first: it activates the inline backend, which would otherwise
            # install its own PNG formatter after ours.
            import matplotlib.pyplot  # noqa: F401
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            set_matplotlib_formats("svg", metadata={"Date": None})
            _show_tables_with_thousands(shell)
    matplotlib.rcParams.update(BOOK_RC)


def with_thousands(df):
    """A copy of the ``pandas.DataFrame`` ``df`` whose integers read with thousands separators
    (``6738415616`` → ``6,738,415,616``), as the book's prose writes them: the integer columns,
    the integers (not ``bool``) in columns of mixed objects, and integer row and column labels
    become text; floats and text
    stay as they are.  ``df`` itself is not changed.

    Raises:
        ValueError: ``df`` is not a DataFrame.
    """
    import numbers

    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df={type(df).__name__} is not allowed; it must be a pandas DataFrame")

    def fmt(x):
        if isinstance(x, numbers.Integral) and not isinstance(x, bool):
            return f"{int(x):,}"
        return x

    out = df.copy()
    for col in out.columns:
        kind = out[col].dtype.kind
        if kind in "iu" or kind == "O":
            out[col] = out[col].map(fmt)
    # integer row and column labels too (a context length as the index, say)
    for axis in ("index", "columns"):
        labels = getattr(out, axis)
        if isinstance(labels, pd.MultiIndex):
            setattr(out, axis, labels.set_levels([lv.map(fmt) if lv.dtype.kind in "iuO" else lv
                                                  for lv in labels.levels]))
        elif labels.dtype.kind in "iuO":
            setattr(out, axis, labels.map(fmt))
    return out


def _show_tables_with_thousands(shell) -> None:
    """Every DataFrame the notebook shows goes through :func:`with_thousands` (HTML and text)."""
    import pandas as pd

    html = shell.display_formatter.formatters["text/html"]
    plain = shell.display_formatter.formatters["text/plain"]
    html.for_type(pd.DataFrame, lambda df: with_thousands(df)._repr_html_())
    plain.for_type(pd.DataFrame, lambda df, p, cycle: p.text(repr(with_thousands(df))))
