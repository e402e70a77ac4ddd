"""llm_dataflow.diagrams: the book's diagrams of ideas, both editions, legible on a phone.

* the committed ``notebooks/figures/<name>.svg`` and ``<name>.zh_CN.svg`` are exactly what the code
  draws (rerun ``tools/diagrams.py`` after changing a diagram or a number it shows);
* each is well-formed SVG with a ``<title>``, an opaque background and no text that would show
  under 11 px in a 390 px phone's column (the canvas refuses to draw one; checked again here on the
  files);
* the Chinese file has Chinese text, and no English-only label left where a translation belongs
  (at least one CJK character per diagram); every diagram is referenced by a notebook;
* the canvas's own checks: unknown language, a label wider than its box, text too small.
"""
import pathlib
import re
import xml.etree.ElementTree as ET

import pytest

from llm_dataflow.diagrams import all_diagrams
from llm_dataflow.diagrams.svg import Canvas, MIN_PHONE_TEXT_PX, PHONE_COLUMN_PX, text_width

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIGS = ROOT / "notebooks" / "figures"
DIAGRAMS = all_diagrams()
NS = "{http://www.w3.org/2000/svg}"


def _files(name):
    return {"en": FIGS / f"{name}.svg", "zh_CN": FIGS / f"{name}.zh_CN.svg"}


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_committed_files_are_what_the_code_draws(name):
    for lang, path in _files(name).items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run tools/diagrams.py {name}"
        assert path.read_text(encoding="utf-8") == DIAGRAMS[name](lang), \
            f"{path.relative_to(ROOT)} is stale: run tools/diagrams.py {name}"


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_svg_is_well_formed_and_legible_on_a_phone(name):
    for lang, path in _files(name).items():
        root = ET.fromstring(DIAGRAMS[name](lang))
        assert root.find(f"{NS}title") is not None and root.find(f"{NS}title").text
        width = float(root.get("width"))
        scale = min(1.0, PHONE_COLUMN_PX / width)
        sizes = [float(t.get("font-size")) for t in root.iter(f"{NS}text")]
        assert sizes and min(sizes) * scale >= MIN_PHONE_TEXT_PX - 1e-9
        text = "".join("".join(t.itertext()) for t in root.iter(f"{NS}text"))
        if lang == "zh_CN":
            assert re.search(r"[\u4e00-\u9fff]", text), f"{name}.zh_CN.svg has no Chinese text"


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_every_diagram_is_shown_by_a_notebook(name):
    used = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert f"figures/{name}.svg" in used, f"no notebook shows figures/{name}.svg"


def test_canvas_refuses_what_a_phone_cannot_read():
    c = Canvas(700, 100, title="t")
    c.text(10, 20, "tiny", size=14)      # 14 × 358 / 700 = 7.2 px on a phone
    with pytest.raises(ValueError, match="shows at 7.2 px"):
        c.svg()
    with pytest.raises(ValueError, match="lang='fr'"):
        Canvas(100, 100, lang="fr", title="t")
    with pytest.raises(ValueError, match="box is 60 px wide"):
        Canvas(300, 100, title="t").box(0, 0, 60, 40, "a label far too long", size=14)
    assert text_width("显存", 10) == 20 and text_width("ab", 10) == pytest.approx(12)
