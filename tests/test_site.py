"""The built web book is self-contained: no page loads a script, stylesheet, font or image from
another host, and every local asset a page references exists.

Needs the built site (``bash tools/build_book.sh`` → ``_build/html``; ``LDF_SITE_DIR`` points
elsewhere).  Skipped when the site is absent, unless ``LDF_REQUIRE_SITE`` is set (CI sets it after
building), in which case a missing site fails.
"""
from __future__ import annotations

import functools
import os
import pathlib
import re
from urllib.parse import unquote, urlsplit

import pytest

bs4 = pytest.importorskip("bs4")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("LDF_SITE_DIR", ROOT / "_build" / "html"))
# Folders of the site that hold libraries and theme files rather than pages.
NOT_PAGES = ("_vendor", "_static", "_sources", "_images")


def _site() -> pathlib.Path:
    if not (SITE / "index.html").is_file():
        if os.environ.get("LDF_REQUIRE_SITE"):
            pytest.fail(f"LDF_REQUIRE_SITE is set but {SITE}/index.html does not exist; "
                        "build with `bash tools/build_book.sh` first")
        pytest.skip(f"no built site at {SITE} (build with `bash tools/build_book.sh`)")
    return SITE


def pages(site: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in site.rglob("*.html")
                  if not set(p.relative_to(site).parts) & set(NOT_PAGES))   # also under zh_CN/


def is_external(url: str) -> bool:
    """True for a URL that reaches another host (http, https, protocol-relative //host)."""
    u = url.strip()
    return bool(re.match(r"^(https?:)?//", u, re.I))


_MEDIA = {"img", "iframe", "source", "video", "audio", "embed", "input"}
_LINK_RELS = {"stylesheet", "preload", "modulepreload", "icon", "shortcut", "apple-touch-icon", "prefetch"}


def _walk(soup) -> dict:
    """What one parsed page loads when opened (``urls``: (kind, url), not links the reader may
    click), its maths elements and its citations, in one walk over its elements.  Eleven
    ``find_all``/``select`` scans took 10.9 s for the 36 pages (6.5 MB), this walk 7.6 s, with
    the same results page by page."""
    scripts, links, media, objects, styles, attrs = [], [], [], [], [], []
    maths, citations = [], []
    for tag in soup.find_all(True):
        name, a = tag.name, tag.attrs
        if name == "script" and "src" in a:
            scripts.append(("script", a["src"]))
        elif name == "link" and "href" in a:
            rel = {r.lower() for r in (a.get("rel") or [])}
            if rel & _LINK_RELS:
                links.append(("link " + " ".join(sorted(rel)), a["href"]))
        elif name in _MEDIA and "src" in a:
            media.append((name, a["src"]))
        elif name == "object" and "data" in a:
            objects.append(("object", a["data"]))
        elif name == "style":
            for m in re.finditer(r"url\(\s*['\"]?([^'\")]+)|@import\s+['\"]([^'\"]+)", tag.get_text()):
                styles.append(("style", m.group(1) or m.group(2)))
        elif name == "a" and "href" in a and any("bibtex-citation" in (p.get("class") or [])
                                                  for p in tag.parents):
            citations.append((" ".join(tag.get_text().split()), urlsplit(a["href"]).fragment))
        if "style" in a:
            for m in re.finditer(r"url\(\s*['\"]?([^'\")]+)", a["style"]):
                attrs.append(("style attr", m.group(1)))
        if "math" in (a.get("class") or []):
            maths.append(tag)
    return {"urls": scripts + links + media + objects + styles + attrs, "maths": maths,
            "citations": citations}


@functools.lru_cache(maxsize=None)
def facts(page: pathlib.Path) -> dict:
    """What the tests below read from one page, parsed once per test process (a page is parsed
    in 0.1-2 s; five tests used to parse every page again)."""
    html = page.read_text(encoding="utf-8")
    seen = _walk(bs4.BeautifulSoup(html, "html.parser"))
    return {
        "urls": seen["urls"],
        "widget_view": "application/vnd.jupyter.widget-view+json" in html,
        "widget_state": "application/vnd.jupyter.widget-state+json" in html,
        "math": len(seen["maths"]),
        "raw_math": [m.get_text()[:60] for m in seen["maths"] if not m.find("mjx-container")],
        "citations": seen["citations"],
    }


def test_site_exists_and_has_pages():
    site = _site()
    assert (site / "_vendor").is_dir() or os.environ.get("LDF_ALLOW_CDN"), (
        "the site has no _vendor/ folder: it was built without npm and loads libraries from CDNs "
        "(set LDF_ALLOW_CDN=1 to accept that)")
    assert len(pages(site)) >= 2


def test_no_page_loads_anything_from_another_host():
    site = _site()
    if not (site / "_vendor").is_dir() and os.environ.get("LDF_ALLOW_CDN"):
        pytest.skip("site built with CDN fallback (LDF_ALLOW_CDN set)")
    bad = []
    for page in pages(site):
        for kind, url in facts(page)["urls"]:
            if is_external(url):
                bad.append(f"{page.relative_to(site)}: {kind} {url}")
    assert not bad, "pages load from other hosts:\n" + "\n".join(bad)


def test_local_assets_of_every_page_exist():
    site = _site()
    missing = []
    for page in pages(site):
        for kind, url in facts(page)["urls"]:
            if is_external(url) or url.startswith(("data:", "blob:", "#", "javascript:")):
                continue
            path = unquote(urlsplit(url).path)
            if not path:
                continue
            target = (page.parent / path).resolve() if not path.startswith("/") else site / path.lstrip("/")
            if not target.exists():
                missing.append(f"{page.relative_to(site)}: {kind} {url}")
    assert not missing, "pages reference missing local files:\n" + "\n".join(missing)


def test_stylesheets_fetch_nothing_from_another_host():
    site = _site()
    bad = []
    for css in site.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"@import\s+(?:url\()?\s*['\"]?((?:https?:)?//[^'\")\s]+)"
                             r"|url\(\s*['\"]?((?:https?:)?//[^'\")\s]+)", text):
            bad.append(f"{css.relative_to(site)}: {m.group(1) or m.group(2)}")
    assert not bad, "stylesheets fetch from other hosts:\n" + "\n".join(bad)


def test_each_library_loads_only_where_it_is_used():
    """The ipywidgets manager (require.js + embed-amd.js, 3.7 MB) loads, from _vendor/, exactly on
    pages that render a widget view; math is SVG written at build time (book/_ext/ldf_math.py), so
    no page loads MathJax; no page loads the theme's 1.5 MB Font Awesome script (the theme's
    stylesheet draws the icons from web fonts)."""
    site = _site()
    if not (site / "_vendor").is_dir():
        pytest.skip("site built with CDN fallback")
    seen_widgets = seen_math = 0
    for page in pages(site):
        f = facts(page)
        srcs = [urlsplit(u).path for k, u in f["urls"] if k == "script"]
        manager = any(s.endswith("_vendor/html-manager/embed-amd.js") for s in srcs)
        if f["widget_view"]:
            seen_widgets += 1
            assert any(s.endswith("_vendor/require.js") for s in srcs), page
            assert manager, f"{page.relative_to(site)} shows widgets but does not load the manager"
        else:
            assert not manager, f"{page.relative_to(site)} loads the widget manager but shows no widget"
            assert not f["widget_state"], page
        assert not any("mathjax" in s.lower() for s in srcs), f"{page.relative_to(site)} loads MathJax"
        assert not any(s.endswith("fontawesome.js") for s in srcs), f"{page.relative_to(site)} loads fontawesome.js"
        seen_math += bool(f["math"])
        raw = f["raw_math"]
        assert not raw, f"{page.relative_to(site)}: math left as TeX: {raw[:3]}"
    assert seen_math >= 1, "no page has math; expected math in the book"


def test_every_page_has_the_favicon():
    site = _site()
    assert (site / "favicon.ico").is_file(), "no favicon.ico at the site root (browsers ask for it)"
    missing = []
    for page in pages(site):
        if page.name == "index.html" and page.parent in (site, site / "zh_CN"):
            continue   # Jupyter Book's redirect to the first page (of each edition)
        icons = [u for k, u in facts(page)["urls"] if "icon" in k.split()]
        if not icons or not (page.parent / unquote(urlsplit(icons[0]).path)).is_file():
            missing.append(str(page.relative_to(site)))
    assert not missing, f"pages without a working icon link: {missing}"


def test_citations_of_one_author_and_year_are_told_apart():
    """Twelve NVIDIA documents of 2025 used to read "[NVIDIA, 2025]" alike: each citation's text
    names one work (book/_ext/ldf_cite.py adds a short title where author and year collide)."""
    site = _site()
    texts: dict[str, set[str]] = {}
    for page in pages(site):
        for text, target in facts(page)["citations"]:
            texts.setdefault(text, set()).add(target)
    shared = {t: ids for t, ids in texts.items() if len(ids) > 1}
    assert texts, "no citation found"
    assert not shared, f"one citation text for several works: {shared}"


def _ldf_i18n():
    import sys

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import ldf_i18n

    return ldf_i18n


def test_a_translated_source_reads_in_its_language():
    """``translate_markdown`` (the 简体中文 download's markdown): a heading, a wrapped paragraph, a
    list item and a dropdown's body and title replaced by their translations (the catalogs'
    msgids: the source's lines joined by spaces); math, code and untranslated text kept."""
    tr = {"1. The map": "1\\. 地图", "A line and its end.": "一行和它的结尾。", "Solution": "解答",
          "Bytes: $2 \\times 70$ GB.": "字节：$2 \\times 70$ GB。", "Why? Say `x`.": "为什么？说 `x`。"}.get
    src = ("## 1. The map\n\nA line\nand its end.\n\n$$x = 1$$\n\n```python\nA line\n```\n\n"
           "1. Why? Say\n   `x`.\n\n:::{dropdown} Solution\nBytes: $2 \\times 70$\nGB.\n:::\n\nKept as is.")
    out = _ldf_i18n().translate_markdown(src, tr)
    assert out == ("## 1\\. 地图\n\n一行和它的结尾。\n\n$$x = 1$$\n\n```python\nA line\n```\n\n"
                   "1. 为什么？说 `x`。\n\n:::{dropdown} 解答\n字节：$2 \\times 70$ GB。\n:::\n\nKept as is."), out


def test_the_chinese_edition_speaks_chinese_in_its_buttons_and_downloads():
    """简体中文 pages: the themes' tooltips, labels and the search box in Chinese (none of the
    English strings the themes leave untranslated); the download button gives the page's
    notebook translated (its first heading as the page shows it); Colab and Binder say they
    open the chapter's Chinese notebook (which
    ``test_launch_buttons_open_the_notebook_of_their_edition`` checks they do)."""
    site = _site()
    zh = [p for p in pages(site / "zh_CN")] if (site / "zh_CN").is_dir() else []
    if not zh:
        pytest.skip("no 简体中文 edition")
    english = {"Toggle primary sidebar", "Toggle secondary sidebar", "Color mode", "System Settings", "Light",
               "Dark", "Launch interactive content", "Launch on Binder", "Launch on Colab", "Search this book...",
               "Link to this heading"}
    left = {}
    for p in zh:
        text = p.read_text(encoding="utf-8")
        for m in re.findall(r'(?:title|aria-label|data-bs-title|placeholder)="([^"]*)"', text):
            if m in english:
                left.setdefault(m, []).append(p.relative_to(site).as_posix())
        assert "Generated-By" not in text, f"{p}: a catalog's header shows on the page (gettext of '')"
    assert not left, {k: v[:2] for k, v in left.items()}
    import json

    chapter = site / "zh_CN" / "notebooks" / "05_prefill_decode_roofline.html"
    soup = bs4.BeautifulSoup(chapter.read_text(encoding="utf-8"), "html.parser")
    href = soup.select_one("a.btn-download-source-button")["href"]
    nb = json.loads((chapter.parent / href).read_text(encoding="utf-8"))
    first = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    title = soup.select_one("article h1").get_text().replace("#", "").strip()
    assert title in first and re.search(r"[\u4e00-\u9fff]", first), (title, first[:120])
    for a in soup.select("a.dropdown-item"):
        if "colab" in a.get("href", "") or "mybinder" in a.get("href", ""):
            assert "中文笔记本" in a.get("title", ""), a.get("title")


#: a launch URL's repository path: Colab ``/github/<org>/<repo>/blob/<branch>/<path>``, Binder
#: ``?urlpath=lab/tree/<path>``, JupyterHub (nbgitpuller) ``urlpath=lab/tree/<repo>/<path>&...``
#: (sphinx-book-theme 1.3.0, ``header_buttons/launch.py``)
_LAUNCH = {"Colab": re.compile(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/([^?#]+)$"),
           "Binder": re.compile(r"/v2/gh/[^?]+\?urlpath=lab/tree/([^&#]+)$"),
           "JupyterHub": re.compile(r"/hub/user-redirect/git-pull\?.*urlpath=lab(?:/tree)?/[^/&]+/([^&#]+)")}


def test_launch_buttons_open_the_notebook_of_their_edition():
    """Every chapter page's Colab/Binder/JupyterHub link opens a notebook the repository holds:
    an English page its ``notebooks/NN_x.ipynb``, a 简体中文 page ``notebooks/zh_CN/NN_x.ipynb``;
    and that committed Chinese notebook is the zh page's download (the same translation) with
    its links moved one folder down (``tools/zh_notebooks.py``)."""
    import json
    import sys

    site = _site()
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_notebooks

    chapters = [p.stem for p in zh_notebooks.chapters()]
    editions = [("", "notebooks/{}.ipynb")] + ([("zh_CN/", "notebooks/zh_CN/{}.ipynb")]
                                                 if (site / "zh_CN").is_dir() else [])
    for prefix, expected in editions:
        seen = {}
        for page in pages(site / prefix) if prefix else [p for p in pages(site)
                                                         if p.relative_to(site).parts[0] != "zh_CN"]:
            soup = bs4.BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
            for a in soup.select("a.dropdown-item"):
                name = a.get_text().strip()
                m = _LAUNCH.get(name) and _LAUNCH[name].search(unquote(a.get("href", "")))
                if name in _LAUNCH:
                    assert m, (page, name, a.get("href"))
                    seen.setdefault(page.stem, {})[name] = m.group(1)
        assert sorted(seen) == chapters, (prefix, sorted(seen))
        for stem, links in seen.items():
            assert {"Colab", "Binder"} <= set(links), (prefix, stem, links)
            for name, path in links.items():
                assert path == expected.format(stem), (prefix, stem, name, path)
                assert (ROOT / path).is_file(), path
    if len(editions) == 1:
        pytest.skip("no 简体中文 edition")
    for stem in chapters:
        download = json.loads((site / "zh_CN" / "_sources" / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
        committed = (zh_notebooks.OUT / f"{stem}.ipynb").read_text(encoding="utf-8")
        assert _ldf_i18n().notebook_text(zh_notebooks.relocate(download)) == committed, stem
