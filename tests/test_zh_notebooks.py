"""The 简体中文 chapter notebooks (``notebooks/zh_CN/``, written by ``tools/zh_notebooks.py``): current
with the English notebooks and the catalogs, the same code and outputs, Chinese headings, links
that resolve from their folder.  (The built site's launch buttons:
``tests/test_site.py::test_launch_buttons_open_the_notebook_of_their_edition``.)
"""
from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import ldf_i18n  # noqa: E402  book/_ext/ldf_i18n.py
import zh_notebooks  # noqa: E402  tools/zh_notebooks.py

CHAPTERS = [p.name for p in zh_notebooks.chapters()]


@pytest.fixture(scope="module")
def expected():
    return zh_notebooks.expected()       # ~1.5 s for the ten chapters


def _nb(path: pathlib.Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _src(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_there_is_one_per_chapter():
    assert len(CHAPTERS) == 10, CHAPTERS
    assert sorted(p.name for p in zh_notebooks.OUT.glob("*.ipynb")) == CHAPTERS
    assert zh_notebooks.OUT == ROOT / "notebooks" / "zh_CN"


def test_committed_zh_notebooks_are_current(expected):
    """Regenerating gives the committed bytes (and nothing else lies in the folder)."""
    assert zh_notebooks.stale(expected) == [], \
        "run `PYTHONPATH=src .venv/bin/python tools/zh_notebooks.py` and commit notebooks/zh_CN/"


def test_generation_is_deterministic(expected):
    again = zh_notebooks.expected()
    assert again == expected


def _without_alt(cell: dict) -> dict:
    """The cell without its outputs and its figure's alt text (which the zh notebook translates)."""
    c = json.loads(json.dumps({k: v for k, v in cell.items() if k != "outputs"}))
    c.get("metadata", {}).get("mystnb", {}).get("image", {}).pop("alt", None)
    return c


@pytest.mark.parametrize("name", CHAPTERS)
def test_code_and_outputs_are_the_english_ones(name):
    """Same cells in the same order; every code cell's source byte-identical, its metadata too but
    the figure's alt text (``mystnb.image.alt``, translated: checked below); every
    output identical but a calculator card's HTML (its labels translated, as on the zh page);
    the notebook's metadata (kernel, the English run's outputs digest) identical."""
    en, zh = _nb(ROOT / "notebooks" / name), _nb(zh_notebooks.OUT / name)
    assert [c["cell_type"] for c in zh["cells"]] == [c["cell_type"] for c in en["cells"]]
    assert zh["metadata"] == en["metadata"]
    cards = alts = 0
    for i, (a, b) in enumerate(zip(en["cells"], zh["cells"])):
        if a["cell_type"] != "code":
            continue
        assert _src(b) == _src(a), (name, i)
        assert json.dumps(_without_alt(b), sort_keys=True) == json.dumps(_without_alt(a), sort_keys=True), (name, i)
        assert len(b["outputs"]) == len(a["outputs"]), (name, i)
        for oa, ob in zip(a["outputs"], b["outputs"]):
            html = "".join(oa.get("data", {}).get("text/html", ""))
            if "ldf-calc-card" in html:
                cards += 1
                assert {k: v for k, v in ob["data"].items() if k != "text/html"} == \
                    {k: v for k, v in oa["data"].items() if k != "text/html"}
                assert re.search(r"[\u4e00-\u9fff]", "".join(ob["data"]["text/html"])), (name, i)
            else:
                assert ob == oa, (name, i)
        alt = b.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
        if alt:
            alts += 1
            assert re.search(r"[\u4e00-\u9fff]", alt), (name, i, alt[:80])
    assert alts, name          # every chapter has a figure
    if name in ("05_prefill_decode_roofline.ipynb", "06_attention_kv_cache.ipynb"):
        assert cards, name


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_heading_left_in_english_where_the_catalog_translates_it(name):
    gettext = zh_notebooks.catalog(zh_notebooks.LOCALE / "notebooks" / name.replace(".ipynb", ".po")).gettext
    headings = [line.lstrip("#").strip()
                for cell in _nb(zh_notebooks.OUT / name)["cells"] if cell["cell_type"] == "markdown"
                for line in _src(cell).split("\n") if re.match(r"#{1,6} ", line)]
    assert headings, name
    left = [h for h in headings if gettext(h) != h]
    assert not left, (name, left)
    assert re.search(r"[\u4e00-\u9fff]", headings[0]), (name, headings[0])   # the title


@pytest.mark.parametrize("name", CHAPTERS)
def test_links_resolve_from_the_zh_folder(name):
    """Every relative markdown link and image of a zh notebook names an existing file (a figure:
    its Chinese version where one exists); every ``{doc}`` role names an existing page."""
    text = "\n".join(_src(c) for c in _nb(zh_notebooks.OUT / name)["cells"] if c["cell_type"] == "markdown")
    links = [t for t in re.findall(r"\]\(([^)\s]+)", text) if not re.match(r"^([a-z]+:|#)", t)]
    for target in links:
        path = target.partition("#")[0]
        assert (zh_notebooks.OUT / path).is_file(), (name, target)
        if path.endswith(".svg"):
            assert path.endswith(".zh_CN.svg") == (zh_notebooks.OUT / path.replace(".zh_CN.svg", ".svg")
                                                   ).with_suffix(".zh_CN.svg").is_file(), (name, target)
    for doc in re.findall(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`", text):
        assert any((zh_notebooks.OUT / (doc + ext)).is_file() for ext in (".md", ".ipynb")), (name, doc)


@pytest.mark.parametrize("name", CHAPTERS)
def test_code_reads_no_file_beside_the_notebook(name):
    """No string in a chapter's code names a file or folder relative to ``notebooks/`` (which a
    copy run from ``notebooks/zh_CN/`` would not find): the code is copied unchanged."""
    found = []
    for cell in _nb(ROOT / "notebooks" / name)["cells"]:
        if cell["cell_type"] == "code":
            for lit in re.findall(r"""(["'])([^"'\n]{2,})\1""", _src(cell)):
                s = lit[1].strip()
                relative = not s.startswith(("/", "~")) and s not in (".", "..")
                if relative and ("/" in s or "." in s) and (ROOT / "notebooks" / s).exists():
                    found.append(s)
    assert not found, (name, found)


def test_relocate_moves_links_one_folder_down():
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": [
            "![图](figures/ch03_layer.svg) ![x](figures/none.png) [第 5 章](05_prefill_decode_roofline.ipynb#sec)\n",
            "[词汇表](../book/glossary.md) [网](https://example.org/a.svg) [本节](#top) "
            "{doc}`规划 <../book/planner>` {doc}`../book/glossary`"]},
        {"cell_type": "code", "metadata": {}, "source": ["open('figures/x.svg')"], "outputs": []}]}
    out = zh_notebooks.relocate(nb)
    assert _src(out["cells"][0]) == (
        "![图](../figures/ch03_layer.zh_CN.svg) ![x](../figures/none.png) "
        "[第 5 章](05_prefill_decode_roofline.ipynb#sec)\n"
        "[词汇表](../../book/glossary.md) [网](https://example.org/a.svg) [本节](#top) "
        "{doc}`规划 <../../book/planner>` {doc}`../../book/glossary`")
    assert out["cells"][1] == nb["cells"][1]          # code is never rewritten
    assert _src(nb["cells"][0]).startswith("![图](figures/")   # the input is not modified


def test_figure_names_follow_the_books_setting():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert cfg["sphinx"]["config"]["figure_language_filename"] == zh_notebooks.FIGURE_LANGUAGE_FILENAME
    assert zh_notebooks.figure_for_language("figures/ch00_datapath.svg") == "figures/ch00_datapath.zh_CN.svg"
    assert zh_notebooks.figure_for_language("figures/absent.svg") == "figures/absent.svg"


def test_translated_notebook_path():
    assert ldf_i18n.translated_notebook_path("notebooks/00_overview.ipynb", "zh_CN") == \
        "notebooks/zh_CN/00_overview.ipynb"
    assert ldf_i18n.translated_notebook_path("a.ipynb", "zh_CN") == "zh_CN/a.ipynb"
    with pytest.raises(ValueError, match="'en'"):
        ldf_i18n.translated_notebook_path("notebooks/00_overview.ipynb", "en")


def test_a_missing_catalog_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        zh_notebooks.catalog(tmp_path / "none.po")


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys, expected):
    out = tmp_path / "zh_CN"
    out.mkdir()
    monkeypatch.setattr(zh_notebooks, "OUT", out)
    monkeypatch.setattr(zh_notebooks, "expected", lambda: {out / p.name: t for p, t in expected.items()})
    monkeypatch.setattr(zh_notebooks, "ROOT", tmp_path)
    assert zh_notebooks.main(["--check"]) == 1
    assert "zh_CN/00_overview.ipynb: missing" in capsys.readouterr().out
    assert zh_notebooks.main([]) == 0
    assert zh_notebooks.main(["--check"]) == 0
    (out / "stray.ipynb").write_text("{}")
    assert zh_notebooks.main(["--check"]) == 1
    assert "stray.ipynb: no English source" in capsys.readouterr().out
    assert zh_notebooks.main([]) == 0 and not (out / "stray.ipynb").exists()


def _launch_context(url_path: str) -> dict:
    """A page context as sphinx-book-theme 1.3.0's ``add_launch_buttons`` leaves it (Binder and
    Colab; ``header_buttons/launch.py``)."""
    return {"header_buttons": [{"type": "group", "label": "launch-buttons", "buttons": [
        {"type": "link", "text": "Binder", "tooltip": "Launch on Binder",
         "url": f"https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/{url_path}"},
        {"type": "link", "text": "Colab", "tooltip": "Launch on Colab",
         "url": f"https://colab.research.google.com/github/o/r/blob/main/{url_path}"}]}]}


def _app(language, srcdir=ROOT):
    from types import SimpleNamespace

    return SimpleNamespace(
        config=SimpleNamespace(language=language, html_theme_options={"path_to_docs": ""}),
        env=SimpleNamespace(doc2path=lambda name: str(srcdir / (name + ".ipynb"))), srcdir=str(srcdir))


def test_launch_links_of_each_edition():
    urls = lambda ctx: [b["url"] for b in ctx["header_buttons"][0]["buttons"]]  # noqa: E731
    en = _launch_context("notebooks/06_attention_kv_cache.ipynb")
    before = urls(en)
    ldf_i18n._launch_links(_app("en"), "notebooks/06_attention_kv_cache", "page.html", en, None)
    assert urls(en) == before                                    # the English edition: unchanged
    zh = _launch_context("notebooks/06_attention_kv_cache.ipynb")
    ldf_i18n._launch_links(_app("zh_CN"), "notebooks/06_attention_kv_cache", "page.html", zh, None)
    assert urls(zh) == [u.replace("notebooks/06_", "notebooks/zh_CN/06_") for u in before]
    assert all(u.count("zh_CN") == 1 for u in urls(zh))


def test_launch_links_stay_english_and_warn_without_the_zh_notebook(tmp_path, caplog):
    (tmp_path / "notebooks").mkdir()
    ctx = _launch_context("notebooks/06_attention_kv_cache.ipynb")
    before = [b["url"] for b in ctx["header_buttons"][0]["buttons"]]
    with caplog.at_level("WARNING"):
        ldf_i18n._launch_links(_app("zh_CN", tmp_path), "notebooks/06_attention_kv_cache", "page.html", ctx, None)
    assert [b["url"] for b in ctx["header_buttons"][0]["buttons"]] == before
    assert "notebooks/zh_CN/06_attention_kv_cache.ipynb does not exist" in caplog.text
