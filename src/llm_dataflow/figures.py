"""The book's figure style: vector figures whose text stays readable on a phone.

A notebook calls :func:`use_book_style` once, in its setup cell.  From then on every matplotlib
figure the inline backend shows is stored as SVG (``image/svg+xml``) instead of an 80-90 dpi PNG,
so it is sharp at any zoom and on any screen, and it is drawn for the narrowest reader:

* matplotlib's SVG is in points (1 pt = 4/3 CSS px), so a figure ``w`` inches wide is ``96 w``
  CSS px wide at its natural size, and a page shows it at most at that size;
* a 390 px phone's column is 358 px wide.  A 6.4 in figure (614 px) is drawn there at 0.58 of
  its size, and its 11 pt (14.7 px) text at 8.6 px.  So every figure is drawn *phone-sized*
  (:func:`phone_sized`, run on each figure as it is shown): at most :data:`FIGURE_WIDTH_IN`
  = 4.6 in wide (442 px; its height in proportion, laid out again at that size), so that its
  smallest text, :data:`MIN_FONT_PT` = 11 pt, shows at 11.9 px or more in that column (and at
  14.7 px, its natural size, on a desktop);  text set smaller than 11 pt is raised to it.  A
  notebook may ask for any figsize: the figure is laid out again at the phone width (the inline
  backend's ``bbox_inches="tight"`` then trims it).  Tick exponents ("10⁴") keep TeX's 0.7 of
  their label;
* ``tests/test_browser.py`` checks every figure of the site at both widths; a tap or click opens
  a figure alone at its natural size (``book/_ext/static/ldf.js``);
* text stays text (``svg.fonttype = "none"``): smaller files than outlined glyphs, selectable and
  searchable; the font list ends in the generic ``sans-serif``;
* the SVG carries no creation date and fixed element ids (``svg.hashsalt``): re-running a
  notebook gives the same bytes.

``BOOK_RC`` holds exactly what changes; everything else keeps matplotlib's defaults.
"""
from __future__ import annotations

__all__ = ["BOOK_RC", "FIGURE_WIDTH_IN", "MIN_FONT_PT", "PHONE_COLUMN_PX", "phone_sized", "use_book_style",
           "with_thousands"]

#: The smallest font size (pt) of the book's figures: tick labels and legends.
MIN_FONT_PT = 11.0
#: The text column of a 390 px phone (CSS px): the narrowest width a figure is drawn at.
PHONE_COLUMN_PX = 358
#: The widest a figure is drawn (in): MIN_FONT_PT × 4/3 px × 358 / (96 × 4.6) = 11.9 px in a
#: 390 px phone's column (``tests/test_figures.py`` checks this arithmetic).
FIGURE_WIDTH_IN = 4.6
#: The narrowest plot area (in) a figure narrows to for the sake of its labels.
MIN_AXES_IN = 1.3

#: matplotlib rcParams the book sets (see the module docstring for why each).
BOOK_RC: dict = {
    "figure.figsize": (FIGURE_WIDTH_IN, 3.0),   # inches: 442 x 288 CSS px at natural size
    "figure.dpi": 100,                   # only for raster fallbacks; SVG is resolution-free
    "savefig.dpi": 200,                  # a PNG someone saves by hand is 2x dense
    "font.size": MIN_FONT_PT,           # annotations and other free text
    "axes.titlesize": 12.0,
    "axes.labelsize": 11.5,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "legend.title_fontsize": MIN_FONT_PT,
    "figure.titlesize": 12.0,
    "legend.framealpha": 0.9,            # a legend over data stays readable
    "svg.fonttype": "none",              # text as <text>, not glyph outlines
    "svg.hashsalt": "llm_dataflow",      # deterministic ids in the SVG
}


def phone_sized(fig) -> None:
    """Make the matplotlib figure ``fig`` phone-sized, in place: at most :data:`FIGURE_WIDTH_IN`
    wide (its height scaled by the same factor), laid out again at that size, and no text under
    :data:`MIN_FONT_PT`.

    A figure with a layout engine (``layout="constrained"``) lays itself out again when drawn;
    one laid out once (``fig.tight_layout()``, or matplotlib's default subplot spacing) gets
    ``tight_layout`` at the new size when every axes is a subplot (an axes placed by hand keeps
    its place).  A legend hung below its axes moves to the figure's foot, in as many of its
    columns as the width holds, and the figure grows by its height; a text wider than the
    figure (a long title) wraps; if labels still reach past the width (long tick labels), the
    figure narrows until what it draws is :data:`FIGURE_WIDTH_IN` wide.  A narrower figure
    keeps its size.

    Raises:
        ValueError: ``fig`` is not a matplotlib Figure.
    """
    import warnings

    import matplotlib.text
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if not isinstance(fig, Figure):
        raise ValueError(f"fig={type(fig).__name__} is not allowed; it must be a matplotlib Figure")
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_text() and t.get_fontsize() < MIN_FONT_PT:
            t.set_fontsize(MIN_FONT_PT)
    w, h = fig.get_size_inches()
    if w <= FIGURE_WIDTH_IN + 1e-9:
        return
    k = FIGURE_WIDTH_IN / w
    fig.set_size_inches(FIGURE_WIDTH_IN, h * k)
    engine = fig.get_layout_engine()
    relayout = (engine is None or isinstance(engine, PlaceHolderLayoutEngine)) and bool(fig.axes) and \
        all(ax.get_subplotspec() is not None for ax in fig.axes)
    with warnings.catch_warnings():   # a layout it cannot improve keeps its place, silently
        warnings.simplefilter("ignore")
        if relayout:
            fig.tight_layout()
        # a legend hung below its axes (bbox_to_anchor under the x axis, so that it hides no
        # curve) was placed for the old size: it moves to the figure's foot, in as many of its
        # columns as the new width holds, and the figure grows by its height
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            leg = ax.get_legend()
            if leg is not None and getattr(leg, "_bbox_to_anchor", None) is not None and \
                    leg.get_bbox_to_anchor().y1 < ax.bbox.y0:
                _legend_at_foot(fig, ax, leg, renderer, relayout)
        # a text wider than the figure (a long title) wraps at the figure's edges
        wide = [t for t in fig.findobj(matplotlib.text.Text)
                if t.get_text() and t.get_visible() and t.get_window_extent(renderer).width > fig.bbox.width]
        for t in wide:
            t.set_wrap(True)
        if wide and relayout:
            fig.tight_layout()
        # a plot area squeezed below MIN_AXES_IN by its labels (long tick labels): the figure
        # widens again until it has that much (its text then shows smaller on a phone)
        for _ in range(3):
            plot = min(ax.get_position().width for ax in fig.axes) * fig.get_size_inches()[0]
            if not relayout or plot >= MIN_AXES_IN - 0.01:
                break
            w_now, h_now = fig.get_size_inches()
            fig.set_size_inches(min(w, w_now + MIN_AXES_IN - plot), h_now)
            fig.tight_layout()
        # labels the layout cannot fit beside the axes (long tick labels): the figure narrows
        # until what it draws is FIGURE_WIDTH_IN wide (the axes give up the room)
        # (never below MIN_AXES_IN of plot: a figure whose labels alone fill a phone keeps its
        # width, and its text shows smaller; tests/test_browser.py names it)
        for _ in range(3):
            drawn = fig.get_tightbbox(renderer).width   # in
            w_now, h_now = fig.get_size_inches()
            if drawn <= FIGURE_WIDTH_IN + 0.02 or not relayout:
                break
            fig.set_size_inches(w_now - (drawn - FIGURE_WIDTH_IN), h_now)
            fig.tight_layout()
            if min(ax.get_position().width for ax in fig.axes) * fig.get_size_inches()[0] < MIN_AXES_IN:
                fig.set_size_inches(w_now, h_now)
                fig.tight_layout()
                break


def _legend_at_foot(fig, ax, leg, renderer, relayout: bool) -> None:
    """Move ``ax``'s legend ``leg`` to the foot of ``fig`` (same entries, title and frame), in at
    most its columns and no wider than the figure, growing the figure by its height."""
    handles, labels = leg.legend_handles, [t.get_text() for t in leg.get_texts()]
    kw = {"loc": "lower center", "frameon": leg.get_frame_on(), "fontsize": leg.get_texts()[0].get_fontsize()}
    if leg.get_title().get_text():
        kw["title"] = leg.get_title().get_text()
    leg.remove()
    n = max(1, getattr(leg, "_ncols", 1))
    while True:
        foot = fig.legend(handles, labels, ncols=n, **kw)
        if n == 1 or foot.get_window_extent(renderer).width <= fig.bbox.width:
            break
        foot.remove()
        n -= 1
    w, h = fig.get_size_inches()
    extra = foot.get_window_extent(renderer).height / fig.dpi + 0.1   # in, with a little air
    fig.set_size_inches(w, h + extra)
    if relayout:
        fig.tight_layout(rect=(0, extra / (h + extra), 1, 1))


def _phone_svg(fig) -> str:
    """The inline backend's SVG of ``fig``, drawn phone-sized (:func:`phone_sized`)."""
    from IPython.core.pylabtools import print_figure

    phone_sized(fig)
    return print_figure(fig, "svg", bbox_inches="tight", metadata={"Date": None})


def use_book_style(*, inline: bool = True) -> None:
    """Apply the book's figure style (``BOOK_RC``) and, inside IPython/Jupyter, show figures as
    phone-sized SVG (:func:`phone_sized`) and tables' integers with thousands separators
    (:func:`with_thousands`).

    Args:
        inline: when True (default) and an IPython kernel is running, make the inline backend emit
            ``image/svg+xml`` only (no PNG), without a creation date, each figure drawn
            phone-sized, so the saved outputs are deterministic and legible at 390 px.  Outside
            IPython only the rcParams change.

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
            from matplotlib.figure import Figure
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            set_matplotlib_formats("svg", metadata={"Date": None})
            shell.display_formatter.formatters["image/svg+xml"].for_type(Figure, _phone_svg)
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
