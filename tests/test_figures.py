"""llm_dataflow.figures: the book's figure style (SVG, legible text, deterministic bytes)."""
import io
import pathlib
import re

import pytest

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from llm_dataflow import figures  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
    # a figure drawn at most FIGURE_WIDTH_IN wide (96 px per inch), shown in a 390 px phone's
    # 358 px column: its smallest text (MIN_FONT_PT, 4/3 px per pt) at >= 11 px (11.9 px)
    w_px = figures.FIGURE_WIDTH_IN * 96
    shown = figures.MIN_FONT_PT * 4 / 3 * min(1.0, figures.PHONE_COLUMN_PX / w_px)
    assert shown >= 11.0 and round(shown, 1) == 11.9
    assert figures.BOOK_RC["figure.figsize"][0] <= figures.FIGURE_WIDTH_IN


def test_phone_sized_shrinks_lays_out_and_raises_small_text():
    """A figure asked for at 6.4 in is drawn at FIGURE_WIDTH_IN, height in proportion, laid out
    again (its labels inside the figure), text under MIN_FONT_PT raised to it; a narrower figure
    keeps its size; a non-figure is refused."""
    with matplotlib.rc_context():
        figures.use_book_style()
        fig, (a, b) = plt.subplots(1, 2, figsize=(6.4, 4.0))
        a.plot([1, 10, 100], [1, 2, 3])
        a.set_xscale("log")
        a.set_ylabel("step (ms)")
        b.set_ylabel("tokens/s")
        b.annotate("small note", (0.5, 0.5), fontsize=8)
        fig.tight_layout()
        figures.phone_sized(fig)
        w, h = fig.get_size_inches()
        assert (w, round(h, 6)) == (figures.FIGURE_WIDTH_IN, round(4.0 * figures.FIGURE_WIDTH_IN / 6.4, 6))
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        fw = fig.bbox.width
        for ax in (a, b):   # laid out again: each axes' labels inside the figure
            bb = ax.get_tightbbox(r)
            assert bb.x0 >= -1 and bb.x1 <= fw + 1, (bb, fw)
        from matplotlib.text import Text
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text()]
        assert min(sizes) >= figures.MIN_FONT_PT
        plt.close(fig)
        small, _ = plt.subplots(figsize=(3.0, 2.0))
        figures.phone_sized(small)
        assert tuple(small.get_size_inches()) == (3.0, 2.0)
        plt.close(small)
        # a legend hung below the axes in columns (chapters 05 and 07 draw theirs so): at the
        # figure's foot, as many columns as fit, the figure no wider than FIGURE_WIDTH_IN
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for name in ("this machine, fp32 (measured)", "A100-80GB-SXM BF16", "H100-SXM BF16",
                     "prefill, T tokens (measured)", "decode step, batch B (measured)"):
            ax.plot([1, 2], [1, 2], label=name)
        ax.set_xlabel("arithmetic intensity (FLOP/B)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
        fig.tight_layout()
        figures.phone_sized(fig)
        assert ax.get_legend() is None and len(fig.legends) == 1
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight")
        width_pt = float(re.search(r'width="([0-9.]+)pt"', buf.getvalue()).group(1))
        assert width_pt <= figures.FIGURE_WIDTH_IN * 72 + 1, width_pt
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        assert fig.legends[0].get_window_extent(r).y1 < ax.xaxis.label.get_window_extent(r).y0   # below the label
        plt.close(fig)
        # a title wider than the figure wraps (chapter 00's byte ledger); tick labels too long for
        # a phone keep a plot area of MIN_AXES_IN, the figure widening for it (chapter 09's rows
        # of published measurements: that figure's text then shows under 11 px on a phone)
        for long_title, ticks in ((True, False), (False, True)):
            fig, ax = plt.subplots(figsize=(6.4, 3.2))
            names = [f"mlperf-v4.1-llama2-70b-row-{i}-offline-scenario" for i in range(4)] if ticks else ["a", "b"]
            ax.barh(names, [1, 2, 3, 4][:len(names)])
            if long_title:
                ax.set_title("Llama-2-7B BF16, 512-token prompt, 128 output tokens and more words", fontsize=12)
            fig.tight_layout()
            figures.phone_sized(fig)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", bbox_inches="tight")
            width_pt = float(re.search(r'width="([0-9.]+)pt"', buf.getvalue()).group(1))
            if ticks:
                plot_in = ax.get_position().width * fig.get_size_inches()[0]
                assert plot_in >= figures.MIN_AXES_IN - 0.02 and fig.get_size_inches()[0] <= 6.4, plot_in
            else:
                assert width_pt <= figures.FIGURE_WIDTH_IN * 72 + 3, width_pt
            plt.close(fig)
    with pytest.raises(ValueError, match="fig=list"):
        figures.phone_sized([])


def test_tables_print_integers_with_thousands_separators():
    """``with_thousands``: integers (int columns and ints among objects) gain separators; floats,
    text and booleans are left alone; the input is not changed; a non-DataFrame is refused."""
    import pandas as pd
    from llm_dataflow.figures import with_thousands

    df = pd.DataFrame({"params": [6_738_415_616, 12], "ms": [1.5, 2250.0], "mixed": ["x", 4096],
                       "flag": [True, False]})
    out = with_thousands(df)
    assert out["params"].tolist() == ["6,738,415,616", "12"]
    assert out["ms"].tolist() == [1.5, 2250.0]
    assert out["mixed"].tolist() == ["x", "4,096"]
    assert out["flag"].tolist() == [True, False]
    assert df["params"].tolist() == [6_738_415_616, 12]
    multi = with_thousands(df.set_index(["params", "flag"]))
    assert list(multi.index) == [("6,738,415,616", True), ("12", False)]
    with pytest.raises(ValueError, match="df=list"):
        with_thousands([1, 2])


def test_saved_tables_show_no_long_integer_without_separators():
    """No table a chapter saved (other than a calculator's) shows an integer of five or more
    digits without thousands separators (issue 29: readers miscount 268435456)."""
    import json
    import re

    bare = re.compile(r"<t[dh][^>]*>\s*-?\d{5,}\s*</t[dh]>")
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            for o in cell.get("outputs", []):
                html = "".join(o.get("data", {}).get("text/html", ""))
                if "<table" in html and "ldf-calc" not in html:
                    found += [f"{path.name} cell {i}: {m.group(0)}" for m in bare.finditer(html)][:3]
    assert not found, "\n".join(found)
