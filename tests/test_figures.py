"""llm_dataflow.figures: the book's figure style (SVG, legible text, deterministic bytes)."""
import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from llm_dataflow import figures  # noqa: E402


def _svg() -> str:
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 4, 9], label="$T = 64$")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.legend()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def test_book_style_sets_legible_text_as_svg_text():
    with matplotlib.rc_context():
        figures.use_book_style()          # no IPython here: rcParams only
        for key, value in figures.BOOK_RC.items():
            assert matplotlib.rcParams[key] == (list(value) if isinstance(value, tuple) else value), key
        svg = _svg()
    sizes = [float(s) for s in re.findall(r"font-size: ([0-9.]+)px", svg)]
    assert sizes, "text must stay <text> (svg.fonttype none)"
    assert min(sizes) >= figures.MIN_FONT_PT
    assert "sans-serif" in svg                # a generic fallback font


def test_book_style_svg_is_deterministic():
    with matplotlib.rc_context():
        figures.use_book_style()
        assert _svg() == _svg()


def test_phone_width_arithmetic_of_the_docstring():
    # 6.4 in at 72 pt/in, shown in a 358 px phone column: the smallest text stays >= 8 px even
    # before bbox_inches="tight" trims the margins (which only enlarges it).
    w_pt = figures.BOOK_RC["figure.figsize"][0] * 72
    assert figures.MIN_FONT_PT * 358 / w_pt >= 8
