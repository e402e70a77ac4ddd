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
    # 6.4 in at 72 pt/in, shown in a 358 px phone column: the smallest text stays >= 8 px even
    # before bbox_inches="tight" trims the margins (which only enlarges it).
    w_pt = figures.BOOK_RC["figure.figsize"][0] * 72
    assert figures.MIN_FONT_PT * 358 / w_pt >= 8


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
