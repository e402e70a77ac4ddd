"""Real-browser tests of the built web book (headless Debian Chromium driven by Playwright).

Every page is opened, over a local static server, at a desktop width (1280 px) and a phone width
(390 px) — the web planner's page in ``tests/test_planner_page.py``, which runs the same checks
(``tests/_browsers.py``) on its own visits.  At each width:

* it loads cleanly: no console error, no request to another host, all math rendered, embedded
  widgets drawn, images loaded, calculators drawn (``test_page_loads_cleanly``); a full-page
  screenshot goes to ``artifacts/screenshots/<page>.<width>.png`` (gitignored);
* nothing is cut off: no code block, output, table or equation is wider than the text column
  unless it scrolls inside its own box *and* shows the scroll affordance of ``book/_ext/static/
  ldf.js``/``ldf.css`` (a shaded edge); no box hides overflow; no table squeezes a column to one
  word per line; the page itself never scrolls sideways (``test_nothing_wider_than_its_column``);
  at desktop width, results (outputs, tables, display equations) fit without scrolling at all
  (``test_results_fit_at_desktop_width``);
* figures are sharp and legible: SVG (vector) or PNG with at least 2 image pixels per CSS
  pixel, and the smallest text of an SVG figure drawn at >= 11 px at both widths (the package
  draws figures phone-sized: ``llm_dataflow.figures``) (``test_figures_sharp_and_legible``);
* the links to the previous and next page keep their text inside them (one was cut by 7 px).

Calculators as a reader drives them (``test_calculators_as_a_reader_drives_them``, both editions,
both widths, every calculator, in the same visit as the page's checks above, after them): each slider dragged with the mouse (desktop) or a finger (phone,
touch events through Chromium's input pipeline) and moved with End / Home / arrow keys: the
readout shows the value the rows echo; no row, control or card cut off or scrolling sideways;
44 px touch targets on the phone; Chinese names complete and no verdict left in English.  Search
finds each edition's own terms, Chinese multi-character terms included, and lists the chapter
that teaches a term first, with an excerpt holding the query
(``test_search_finds_and_ranks_the_books_terms``); a figure opens enlarged on a tap, with its
smallest text >= 10 px and its close control on the screen (``test_figures_enlarge_on_a_phone``);
the language switch keeps the section; the 简体中文 edition's theme tooltips are Chinese.

Besides: the phone drawer opens and its chapter links work, the intro's chapter table links
every chapter (``test_phone_navigation``); one search box per page (``test_one_search_box``);
each page's weight, every byte the browser fetches from an empty cache, is under 4 MB for pages
without widgets (``test_page_weight``, rows in ``artifacts/page_weight/``); calculators
follow their controls; the site works from ``file://``, search included; dark mode stays
readable.

Needs: the built site (``bash tools/build_book.sh``; ``LDF_SITE_DIR`` points elsewhere), the
``playwright`` Python package and Debian's ``chromium`` (``apt-get install -y chromium``; never
``playwright install``; ``LDF_CHROMIUM`` overrides the path).  Skipped when the site or the
browser is absent unless ``LDF_REQUIRE_SITE`` is set (CI), in which case that fails.
"""
from __future__ import annotations

import functools
import http.server
import importlib
import json
import os
import pathlib
import re
import threading
from urllib.parse import unquote, urlsplit

import pytest
from _browsers import (CALC_LAYOUT_JS, CONTROL_JS, WIDTHS, CachedVisit, Visit, check_page, chromium, drag,
                       layout_problems, look, new_context, require, svg_text, wide_results)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("LDF_SITE_DIR", ROOT / "_build" / "html"))
ARTIFACTS = ROOT / "artifacts"
SHOTS = ARTIFACTS / "screenshots"
#: full-page screenshots (every page at each width, the dark page; 0.5–4 CPU-s each): LDF_SCREENSHOTS=1
FULL_PAGE_SHOTS = os.environ.get("LDF_SCREENSHOTS") == "1"
NOT_PAGES = ("_vendor", "_static", "_sources", "_images")
TIMEOUT_MS = 30_000
MAX_PAGE_MB = 4.0               # every byte fetched from an empty cache, MB = 1e6 bytes
MAX_WIDGET_PAGE_MB = 7.0        # pages that render ipywidgets views (the 3.6 MB widget manager)


_require = require      # skip, or fail under LDF_REQUIRE_SITE (tests/_browsers.py)
_chromium = chromium


def site_pages() -> list[str]:
    if not SITE.is_dir():
        return []
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                  if not set(p.relative_to(SITE).parts) & set(NOT_PAGES)   # also under zh_CN/
                  and p.name not in ("genindex.html", "search.html", "index.html"))


#: the web planner (Pyodide, in both editions): tests/test_planner_page.py runs this file's per-page
#: checks (``check_page``, ``layout_problems``, ``figure_problems``, ``wide_results``, no console
#: error, no other host) on its own cold visit at each width, after its first plan and chart are
#: drawn: each edition and width starts Pyodide in one test, not two
PLANNER = "book/planner.html"


def _per_page() -> list[str]:
    """The pages this file's per-page tests open: every page but the planner's."""
    return [p for p in site_pages() if not p.endswith(PLANNER)]


def _page_params():
    pages = _per_page() or ["(no site)"]
    return [pytest.param(rel, w, id=f"{rel}-{w}") for rel in pages for w in WIDTHS]


@pytest.fixture(scope="session")
def browser(chromium_browser):
    _require((SITE / "index.html").is_file(), f"no built site at {SITE} (bash tools/build_book.sh)")
    return chromium_browser     # conftest.py: one Chromium per test process


@pytest.fixture(scope="session")
def server():
    """A plain static server of the site on 127.0.0.1 (an ephemeral port)."""
    _require((SITE / "index.html").is_file(), f"no built site at {SITE}")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):   # the browser moved on
                pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


_INSPECTED: dict[tuple[str, str], dict] = {}
_CONTEXTS: dict[str, object] = {}     # one browser context per width in this worker (a warm cache)


def _warm_visit(browser, server, width: str = "desktop") -> CachedVisit:
    """A new page in this worker's context for ``width``: the site's scripts, styles and fonts
    come from the cache after the first page (no test here stores anything in the context)."""
    if width not in _CONTEXTS:
        _CONTEXTS[width] = new_context(browser, WIDTHS[width])
    return CachedVisit(_CONTEXTS[width], server)


def _inspect(browser, server, rel: str, width: str) -> dict:
    """Open ``rel`` at ``width`` once per session, in this worker's context for that width
    (``CachedVisit``); every per-page test reads the result."""
    key = (rel, width)
    if key not in _INSPECTED:
        v = _warm_visit(browser, server, width)
        try:
            page = v.open(rel, idle=False)      # check_page waits for what the page loads late
            result = {"load_error": None}
            try:
                result.update(check_page(page))
            except AssertionError as e:
                result["load_error"] = str(e)
            result.update(look(page, SITE, rel, width))    # layout and figures
            result["bytes"] = v.resources()     # what an empty cache would fetch: test_page_weight
            if FULL_PAGE_SHOTS:
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / f"{rel.replace('/', '__')}.{WIDTHS[width]}.png"), full_page=True)
            result["errors"], result["external"] = list(v.errors), list(v.external)
            # the calculators, in the same visit: set to their last values against the package
            # (desktop), then driven as a reader does (each width); their own tests read this
            if _specs(rel) and result["load_error"] is None:
                # each control's value as the page opened: the drive starts from it again
                starts = page.evaluate("""() => Array.from(document.querySelectorAll('.ldf-calc-static'))
                    .map(c => Object.fromEntries(Array.from(c.querySelectorAll('[name]'))
                                                 .map(e => [e.getAttribute('name'), e.value])))""")
                for what, run in (("follow", _follow_page if width == "desktop" else None),
                                  ("drive", functools.partial(_drive_page, starts=starts))):
                    try:
                        result[what] = run(page, rel, width) if run else None
                    except Exception as e:   # a timeout: the test of that step says so
                        result[what] = {"checked": 0, "problems": [f"{type(e).__name__}: {e}"[:2000]]}
                result["drive_errors"] = v.errors[len(result["errors"]):]
        finally:
            v.close()
        _INSPECTED[key] = result
    return _INSPECTED[key]


@pytest.mark.parametrize("rel,width", _page_params())
def test_page_loads_cleanly(browser, server, rel, width):
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    r = _inspect(browser, server, rel, width)
    assert r["load_error"] is None, f"{rel}: {r['load_error']}"
    assert not r["external"], f"{rel} requested other hosts: {r['external']}"
    assert not r["errors"], f"{rel} console errors: {r['errors']}"


@pytest.mark.parametrize("rel,width", _page_params())
def test_nothing_wider_than_its_column(browser, server, rel, width):
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    problems = layout_problems(_inspect(browser, server, rel, width)["layout"], width)
    assert not problems, f"{rel} at {WIDTHS[width]} px:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("rel", _per_page() or ["(no site)"])
def test_results_fit_at_desktop_width(browser, server, rel):
    """At 1280 px an output, a table or a display equation the text discusses is seen whole:
    no sideways scrolling (code cells may scroll, with the cue)."""
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    wide = wide_results(_inspect(browser, server, rel, "desktop")["layout"])
    assert not wide, f"{rel}: results that do not fit a 1280 px page's column:\n  " + "\n  ".join(wide)


@pytest.mark.parametrize("rel,width", _page_params())
def test_figures_sharp_and_legible(browser, server, rel, width):
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    problems = _inspect(browser, server, rel, width)["figures"]
    assert not problems, f"{rel}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("width", list(WIDTHS))
def test_language_switch(browser, server, width):
    """Every page of each edition links to the same page of the other; on a chapter page the
    switch is visible at both widths, opens the other edition's page (lang attribute, translated
    title) and leads back."""
    en, zh = _edition_pages("en"), _edition_pages("zh_CN")
    _require(bool(zh), f"no 简体中文 edition under {SITE}/zh_CN (bash tools/build_book.sh)")
    assert sorted(p[len("zh_CN/"):] for p in zh) == sorted(en)
    for rel in en + zh:
        text = (SITE / rel).read_text(encoding="utf-8")
        m = re.search(r'<a class="btn ldf-language" href="([^"]+)"', text)
        assert m, f"{rel}: no language switch"
        target = (SITE / rel).parent / m.group(1)
        other = rel[len("zh_CN/"):] if rel.startswith("zh_CN/") else "zh_CN/" + rel
        assert target.resolve() == (SITE / other).resolve(), (rel, m.group(1))
    chapter = next(p for p in en if p.startswith("notebooks/"))
    v = _warm_visit(browser, server, width)
    try:
        page = v.open(chapter)
        en_title = page.locator("article h1").first.inner_text()
        switch = page.locator("a.ldf-language")
        assert switch.count() == 1 and switch.is_visible(), f"switch not visible at {width}"
        with page.expect_navigation(timeout=TIMEOUT_MS):
            switch.click()
        assert page.url.split("#")[0].endswith("zh_CN/" + chapter), page.url
        assert page.locator("html").get_attribute("lang") == "zh-CN"
        zh_title = page.locator("article h1").first.inner_text()
        assert zh_title != en_title and re.search(r"[\u4e00-\u9fff]", zh_title), zh_title
        back = page.locator("a.ldf-language")
        assert back.is_visible()
        with page.expect_navigation(timeout=TIMEOUT_MS):
            back.click()
        assert page.url.split("#")[0].endswith("/" + chapter) and "zh_CN" not in page.url, page.url
        assert not v.errors and not v.external, (v.errors, v.external)
        page.screenshot(path=str(SHOTS / f"language-switch-{width}.png")) if SHOTS.is_dir() else None
    finally:
        v.close()


def test_phone_navigation(browser, server):
    """At 390 px: the "toggle primary sidebar" button opens the drawer, a chapter link in it
    opens that chapter; the "on this page" button opens the page's contents; the intro's chapter
    table links every chapter."""
    chapters = [p for p in site_pages() if p.startswith("notebooks/")]
    if not chapters:
        pytest.skip("no chapter page")
    v = _warm_visit(browser, server, "phone")
    try:
        page = v.open(chapters[0])
        toggles = page.locator(".primary-toggle")
        visible = [i for i in range(toggles.count()) if toggles.nth(i).is_visible()]
        assert toggles.count() == 1 and visible, \
            f"{toggles.count()} .primary-toggle buttons, visible: {visible} (the theme wires only the first)"
        toggles.first.tap()
        page.wait_for_function("() => document.getElementById('pst-primary-sidebar-modal').open", timeout=5_000)
        target = chapters[-1]
        link = page.locator(f'#pst-primary-sidebar-modal a[href$="{pathlib.PurePosixPath(target).name}"]').first
        assert link.is_visible(), "the drawer shows no link to the last chapter"
        with page.expect_navigation(timeout=TIMEOUT_MS):
            link.tap()
        assert page.url.endswith(target), page.url
        page.locator(".secondary-toggle:visible").first.tap()
        page.wait_for_function("() => document.getElementById('pst-secondary-sidebar-modal').open", timeout=5_000)
        assert page.locator("#pst-secondary-sidebar-modal a").first.is_visible()
        page = v.open("book/intro.html")
        hrefs = page.eval_on_selector_all("article table a[href]", "els => els.map(e => e.getAttribute('href'))")
        linked = {pathlib.PurePosixPath(urlsplit(h).path).name for h in hrefs}
        missing = [c for c in _toc_chapters() if pathlib.PurePosixPath(c).name not in linked]
        assert not missing, f"the intro's chapter table does not link: {missing}"
        assert not v.errors, v.errors
    finally:
        v.close()


def _toc_chapters() -> list[str]:
    """The pages of the "Chapters" part of _toc.yml, as built file names."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [c["file"] + ".html" for part in toc.get("parts", []) if part.get("caption") == "Chapters"
            for c in part.get("chapters", [])]


@pytest.mark.parametrize("width", list(WIDTHS))
def test_one_search_box(browser, server, width):
    """One visible search box or button per page (the theme's extra header bar added a second)."""
    v = _warm_visit(browser, server, width)
    try:
        for rel in [p for p in site_pages() if p.startswith("notebooks/")][:1] + ["search.html"]:
            page = v.open(rel)
            n = page.evaluate("""() => Array.from(document.querySelectorAll(
                    '.search-button-field, .search-button, form.bd-search'))
                .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden'
                             && !e.closest('dialog:not([open])') && !e.closest('#search-documentation, .bd-search-container'))
                .length""")
            assert n == 1, f"{rel} at {WIDTHS[width]} px shows {n} search boxes"
    finally:
        v.close()


def _weight_pages() -> list[str]:
    # the planner page (Pyodide) has its own limit, measured gzip-served: tests/test_planner_page.py
    pages = _per_page()
    return pages + ["search.html"] if pages else ["(no site)"]


@pytest.mark.parametrize("rel", _weight_pages())
def test_page_weight(browser, server, rel):
    """Every byte a first visit fetches (HTML, CSS, scripts, fonts, images; empty cache), read
    from the desktop visit the per-page tests share (``_inspect``): the page's Resource Timing
    entries, body bytes as this uncompressed server sends them (a warm cache keeps them).  Pages
    without an ipywidgets view stay under MAX_PAGE_MB; each page's row goes to ``artifacts/page_weight/``."""
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    r = _inspect(browser, server, rel, "desktop")
    assert r["load_error"] is None, f"{rel}: {r['load_error']}"
    total = sum(r["bytes"].values()) / 1e6
    biggest = sorted(r["bytes"].items(), key=lambda kv: -kv[1])[:3]
    row = (f"{rel:45s} {total:6.2f} MB  {len(r['bytes']):3d} files  widgets={r['widgets']:2d}  "
           + ", ".join(f"{urlsplit(u).path.rsplit('/', 1)[-1]} {b / 1e6:.2f}" for u, b in biggest))
    out = ARTIFACTS / "page_weight"
    out.mkdir(parents=True, exist_ok=True)
    (out / (rel.replace("/", "__") + ".txt")).write_text(row + "\n", encoding="utf-8")
    limit = MAX_WIDGET_PAGE_MB if r["widgets"] else MAX_PAGE_MB
    assert total <= limit, f"{rel} too heavy: {total:.2f} MB > {limit} MB\n{row}"


def _specs(rel: str) -> list[dict]:
    """The Vega-Lite specs of the static calculators on a page, in page order."""
    text = (SITE / rel).read_text(encoding="utf-8")
    return [json.loads(m.group(1).replace("<\\/", "</"))
            for m in re.finditer(r"spec = (\{.*?\});\n", text, re.S)]


# The editions: (code, folder of its pages under the site root); book/_ext/ldf_i18n.py.
EDITIONS = {"en": "", "zh_CN": "zh_CN/"}


def _edition_pages(code: str) -> list[str]:
    prefix = EDITIONS[code]
    others = tuple(f for c, f in EDITIONS.items() if f and c != code)
    return [p for p in site_pages() if p.startswith(prefix) and not p.startswith(others)]


def _translator(rel: str):
    """The page's catalog as a function (identity on English pages and for untranslated text)."""
    code = next((c for c, f in EDITIONS.items() if f and rel.startswith(f)), "en")
    if code == "en":
        return lambda s: s
    from babel.messages.pofile import read_po
    po = ROOT / "locale" / code / "LC_MESSAGES" / (rel[len(EDITIONS[code]):-len(".html")] + ".po")
    with open(po, "rb") as f:
        table = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    return lambda s: table.get(s, s)


def _calculators(code: str = "en") -> dict[str, tuple[str, int]]:
    """{package function: (first page of edition ``code`` showing it, its index on the page)}."""
    found: dict[str, tuple[str, int]] = {}
    for rel in _edition_pages(code):
        for i, spec in enumerate(_specs(rel)):
            found.setdefault(spec.get("usermeta", {}).get("fn", ""), (rel, i))
    return found


def _package_function(path: str):
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None


def _shown(calc) -> dict:
    """{row name: shown text} of a calculator's rows (its HTML table, see llm_dataflow.live)."""
    return calc.evaluate("""el => Object.fromEntries(Array.from(el.querySelectorAll('table.ldf-calc-rows tr'))
        .map(tr => [tr.cells[0].textContent, tr.cells[1].textContent]))""")


def _follow_controls(page, rel: str, i: int, fn_path: str, fn, tr) -> int:
    """Set every control of calculator ``i`` on ``page`` to its last value; the rows show what
    ``fn`` returns there. Returns 1 (one calculator checked)."""
    from llm_dataflow import live

    calc = page.locator(".ldf-calc-static").nth(i)
    calc.scroll_into_view_if_needed()
    page.wait_for_function("el => el.hasAttribute('data-ldf-ready')", arg=calc.element_handle(),
                           timeout=TIMEOUT_MS)
    spec = _specs(rel)[i]
    controls = spec["usermeta"]["controls"]
    before = _shown(calc)
    # the last value of every control: a setting that differs from the initial one
    params = {}
    for a, (k, vals) in enumerate(controls.items()):
        last = len(vals) - 1
        params[k] = vals[last]
        el = calc.locator(f'[name="p{a}"]')
        if el.evaluate("e => e.tagName") == "SELECT":
            el.select_option(value=str(last))
        else:
            el.fill(str(last))
    want = live._label(params[list(controls)[-1]])
    page.wait_for_function("([el, k, v]) => Array.from(el.querySelectorAll('tr.ldf-ctl'))"
                           ".some(tr => tr.cells[0].textContent === k && tr.cells[1].textContent === v)",
                           arg=[calc.element_handle(), f"{tr(list(controls)[-1])} =", want],
                           timeout=TIMEOUT_MS)
    after = _shown(calc)
    try:
        expected = dict(live.calculator_rows(fn(**params)))   # names without unit, values with
    except Exception as e:   # the page shows the error the function raises
        expected = {"error": f"{type(e).__name__}: {e}"}
    for k, text in expected.items():   # a value's words in the edition's language
        t = live.value_template(text)
        if t and tr(t[0]) != t[0]:
            expected[k] = live._fill(tr(t[0]), t[1])
    for k, val in controls.items():
        # the readout beside a control: the value as the slider / dropdown labels it
        assert after.get(f"{tr(k)} =") == live._label(params[k]), (fn_path, k, after)
    for k, text in expected.items():
        assert after.get(tr(k)) == text, f"{fn_path} on {rel} at {params}: {k!r} shows {after.get(tr(k))!r}, package {text!r}"
    if any(len(x) > 1 for x in controls.values()):
        assert after != before, f"{fn_path}: moving the controls changed nothing"
    return 1


def _follow_page(page, rel: str, width: str = "desktop") -> dict:
    """:func:`_follow_controls` for each calculator of a package function whose first page in
    its edition is ``rel``: {"checked": n, "problems": [...]}."""
    code = next((c for c, f in EDITIONS.items() if f and rel.startswith(f)), "en")
    tr, checked, problems = _translator(rel), 0, []
    for fn_path, (first, i) in sorted(_calculators(code).items()):
        fn = _package_function(fn_path) if first == rel else None
        if fn is None:
            continue   # shown first on another page, or not an importable package function
        try:
            checked += _follow_controls(page, rel, i, fn_path, fn, tr)
        except AssertionError as e:
            problems.append(f"{fn_path} (#{i}): {e}")
    return {"checked": checked, "problems": problems}


def _follow_params():
    pages = sorted({rel for code in EDITIONS for fn, (rel, _) in _calculators(code).items()
                    if _package_function(fn) is not None}) if site_pages() else []
    return pages or ["(no site)"]


@pytest.mark.parametrize("rel", _follow_params())
def test_every_calculator_follows_its_controls(browser, server, rel):
    """Move every control of one calculator per package function (on the first page of each
    edition that shows it) to its last value; the page shows fn's values (under the edition's
    translated labels). Done in the page's desktop visit (``_inspect``)."""
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    r = _inspect(browser, server, rel, "desktop")
    assert r["load_error"] is None, f"{rel}: {r['load_error']}"
    f = r["follow"]
    assert not f["problems"], f"{rel}:\n  " + "\n  ".join(f["problems"])
    assert f["checked"], f"{rel}: no calculator of an importable package function checked"
    assert not r["drive_errors"], r["drive_errors"]


def test_site_works_from_file_urls(browser):
    """Opened straight from disk: pages with math, widgets and calculators still render, and the
    search lists results quietly (no excerpts: a page from disk may not read other files)."""
    _require((SITE / "index.html").is_file(), f"no built site at {SITE}")
    pages = site_pages()
    chosen = [p for p in pages if p.startswith("book/")][:1]
    calcs = _calculators()
    chosen += sorted({rel for rel, _ in calcs.values()})[:2]
    chosen += [p for p in pages if p.startswith("notebooks/")][:1]
    widget_pages = [p for p in pages if "application/vnd.jupyter.widget-view+json" in (SITE / p).read_text(encoding="utf-8")]
    chosen += widget_pages[:1]
    v = Visit(browser, SITE.resolve().as_uri())
    try:
        for rel in dict.fromkeys(chosen):
            page = v.open(rel)
            check_page(page)
        page = v.open("search.html?q=prefill")
        page.wait_for_selector("ul.search li", timeout=TIMEOUT_MS)
        page.wait_for_timeout(500)
        assert page.locator("ul.search li").count() >= 1
        assert page.locator(".ldf-file-search-note").is_visible(), "no note on why excerpts are missing"
        assert not v.external, f"requests to other hosts from file://: {v.external}"
        assert not v.errors, f"console errors from file://: {v.errors}"
    finally:
        v.close()


def test_search_and_launch_buttons(browser, server):
    """The built-in search finds a glossary term; notebook pages offer launch and download links."""
    v = _warm_visit(browser, server)
    try:
        page = v.open("search.html?q=prefill")
        page.wait_for_selector("#search-results li, ul.search li", timeout=TIMEOUT_MS)
        assert page.locator("ul.search li").count() >= 1
        if (SITE / "zh_CN" / "search.html").is_file():
            # the Chinese index is split into words by jieba (requirements.txt)
            page = v.open("zh_CN/search.html?q=%E7%BC%93%E5%AD%98")   # 缓存, "cache"
            page.wait_for_selector("ul.search li", timeout=TIMEOUT_MS)
            assert page.locator("ul.search li").count() >= 1
        nb = [p for p in site_pages() if p.startswith("notebooks/")]
        if nb:
            page = v.open(nb[0])
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            assert any(h.endswith(".ipynb") and "_sources/" in h for h in hrefs), "no notebook download"
            assert any("mybinder.org" in h or "colab.research.google.com" in h for h in hrefs), \
                "no launch button (repository.url / launch_buttons in _config.yml)"
        assert not v.external, v.external
        assert not v.errors, v.errors
    finally:
        v.close()


def _luminance(rgb: str) -> float:
    vals = [float(x) for x in re.findall(r"[0-9.]+", rgb)[:3]]
    lin = [(c / 255 / 12.92) if c / 255 <= 0.03928 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in vals]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(fg: str, bg: str) -> float:
    a, b = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def test_dark_mode_keeps_calculators_and_figures_readable(browser, server):
    """In the dark theme, calculator text contrasts with its card (WCAG AA, 4.5:1), figures keep
    an opaque background, math follows the text colour.  Screenshot: LDF_SCREENSHOTS=1."""
    calcs = _calculators()
    pages = sorted({rel for rel, _ in calcs.values()})[:1] or [p for p in site_pages() if p.startswith("notebooks/")][:1]
    if not pages:
        pytest.skip("no notebook page")
    v = Visit(browser, server, color_scheme="dark")
    try:
        page = v.open(pages[0])
        page.evaluate("() => { localStorage.setItem('mode', 'dark'); }")
        page = v.open(pages[0])
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        check_page(page)
        # the colour behind each card: its own, or that of the first ancestor that paints one
        cards = page.eval_on_selector_all(".ldf-calc-card", """els => els.map(e => {
            let b = e;
            while (b && ['rgba(0, 0, 0, 0)', 'transparent'].includes(getComputedStyle(b).backgroundColor))
              b = b.parentElement;
            return [b ? getComputedStyle(b).backgroundColor : 'rgb(255, 255, 255)', getComputedStyle(e).color]; })""")
        for bg, fg in cards:
            assert _contrast(fg, bg) >= 4.5, (bg, fg)
            assert _luminance(bg) < 0.2, f"a calculator sits on a light background in dark mode: {bg}"
        figs = page.eval_on_selector_all(".cell_output img", "els => els.map(e => getComputedStyle(e).backgroundColor)")
        assert all(bg not in ("rgba(0, 0, 0, 0)", "transparent") for bg in figs), figs
        math = page.eval_on_selector_all("mjx-container svg", "els => els.slice(0, 3).map(e => [getComputedStyle(e).color, getComputedStyle(document.body).color])")
        assert all(c == body for c, body in math), math
        if FULL_PAGE_SHOTS:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / (pages[0].replace("/", "__") + ".dark.png")), full_page=True)
        assert not v.errors, v.errors
    finally:
        v.page.evaluate("() => localStorage.removeItem('mode')")
        v.close()


# --- calculators as a reader drives them ----------------------------------------------------
# Touch targets (WCAG 2.5.5): a control at least this tall, a slider step at least this wide.
MIN_TARGET_PX = 44.0
MIN_SLIDER_STEP_PX = 16.0

def _calculator_pages(code: str) -> list[str]:
    return [rel for rel in _edition_pages(code) if _specs(rel)]


def _drive_page(page, rel: str, width: str, starts: list[dict] | None = None) -> dict:
    """Every calculator of ``page``, driven as a reader does (see
    :func:`test_calculators_as_a_reader_drives_them`), each slider from ``starts[i][name]``
    (its value when the page opened; another check may have moved it since):
    {"checked": n, "problems": [...]}."""
    from llm_dataflow import live

    phone = width == "phone"
    tr = _translator(rel)
    edition = next((c for c, f in EDITIONS.items() if f and rel.startswith(f)), "en")
    problems, checked, shot = [], 0, False
    # element handles and one CDP session for the page: a drive is ~15 round trips per slider
    cdp = page.context.new_cdp_session(page) if phone else None
    for i, spec in enumerate(_specs(rel)):
        calc = page.locator(".ldf-calc-static").nth(i).element_handle()
        calc.scroll_into_view_if_needed()
        labels = next(p["value"] for p in spec["params"] if p["name"] == "ldf_c")
        where = f"{rel} #{i} ({spec['title']['text'][:40]}) at {WIDTHS[width]} px"
        for a, lab in enumerate(labels):
            el = calc.query_selector(f'[name="p{a}"]')
            kind, value = el.evaluate("e => [e.type, e.value]")
            if kind != "range":
                el.select_option(value=str(len(lab) - 1))
                page.wait_for_function(
                    "([el, a, v]) => el.querySelectorAll('tr.ldf-ctl')[a].cells[1].textContent === v",
                    arg=[calc, a, lab[-1]], timeout=TIMEOUT_MS)
                continue
            start = (starts[i] if starts and i < len(starts) else {}).get(f"p{a}")
            if start is not None and value != start:
                el.fill(start)
                value = start
            moves = [("drag to the middle", lambda: drag(page, el, 0.5, phone, cdp)),
                     ("End", lambda: el.press("End")), ("Home", lambda: el.press("Home")),
                     ("ArrowRight", lambda: el.press("ArrowRight"))]
            for what, move in moves:
                move()
                if what == "drag to the middle":
                    try:
                        page.wait_for_function("([e, b]) => e.value !== b",
                                               arg=[el, value], timeout=5_000)
                    except Exception:
                        problems.append(f"{where}: dragging slider p{a} did not move it (at {value})")
                st = calc.evaluate(CONTROL_JS, a)
                want = lab[st["index"]]
                if not (st["readout"] == want == st["echo"]):
                    problems.append(f"{where}: {spec['usermeta']['controls'] and list(spec['usermeta']['controls'])[a]!r} "
                                    f"after {what}: slider at {want!r}, readout {st['readout']!r}, row {st['echo']!r}")
            if not shot and rel.endswith("05_prefill_decode_roofline.html"):
                shot = True
                SHOTS.mkdir(parents=True, exist_ok=True)
                drag(page, el, 0.6, phone, cdp)
                page.locator(".ldf-calc-static").nth(i).locator(
                    "xpath=ancestor::div[contains(@class,'ldf-calc-card')]").screenshot(
                    path=str(SHOTS / f"calculator-{edition}-{width}.png"))
        lay = calc.evaluate(CALC_LAYOUT_JS)
        problems += [f"{where}: cut off: {c}" for c in lay["clipped"]]
        if phone:
            for t in lay["targets"]:
                if t["height"] < MIN_TARGET_PX - 0.5:
                    problems.append(f"{where}: {t['kind']} {t['name']} is {t['height']:.0f} px tall "
                                    f"(< {MIN_TARGET_PX:.0f})")
                if t["step"] is not None and t["step"] < MIN_SLIDER_STEP_PX:
                    problems.append(f"{where}: slider {t['name']} step {t['step']:.1f} px "
                                    f"(< {MIN_SLIDER_STEP_PX:.0f})")
        if edition != "en":
            names = {tr(n) for col in next(p["value"] for p in spec["params"] if p["name"] == "ldf_n")
                     for n in col if isinstance(n, str)}
            for n, val in lay["values"]:
                if n.strip() and n not in names:
                    problems.append(f"{where}: row name {n!r} is not a translated name of the card")
                t = live.value_template(val)
                if t and tr(t[0]) != t[0]:
                    problems.append(f"{where}: {n!r} shows {val!r} in English ({tr(t[0])!r})")
        checked += 1
    if cdp is not None:
        cdp.detach()
    return {"checked": checked, "problems": problems}


def _drive_params():
    pages = [rel for code in EDITIONS for rel in _calculator_pages(code)] if site_pages() else []
    return [pytest.param(rel, w, id=f"{rel}-{w}") for rel in pages for w in WIDTHS] or ["(no site)"]


@pytest.mark.parametrize("rel,width", _drive_params())
def test_calculators_as_a_reader_drives_them(browser, server, rel, width):
    """Every calculator of the page, driven as a reader does: each slider dragged (mouse on
    the desktop, a finger on the phone) and moved with the keys (End, Home, arrow): its readout
    shows the value the slider stands for, the same the rows echo; no row, control or card is
    cut off or scrolls sideways; on the phone every control is a 44 px touch target; in a
    translated edition the rows show translated names complete and no value left in English
    where the catalog translates its words.  Done in the page's visit at that width
    (``_inspect``).  Screenshot of chapter 05's first calculator after a drag:
    ``artifacts/screenshots/calculator-<edition>-<width>.png``."""
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    r = _inspect(browser, server, rel, width)
    assert r["load_error"] is None, f"{rel}: {r['load_error']}"
    d = r["drive"]
    assert not d["problems"], f"{rel} at {WIDTHS[width]} px:\n  " + "\n  ".join(d["problems"])
    assert d["checked"], f"{rel}: no calculator checked"
    assert not r["drive_errors"], r["drive_errors"]


# The book's own terms, and a page each must find: (query, page name without .html).
SEARCH_TERMS = {
    "en": [("roofline", "05_prefill_decode_roofline"), ("prefill", "05_prefill_decode_roofline"),
           ("KV cache", "06_attention_kv_cache"), ("tensor parallelism", "07_multi_gpu"),
           ("pipeline parallelism", "07_multi_gpu"), ("expert parallelism", "07_multi_gpu"),
           ("speculative decoding", "08_optimization_map"), ("arithmetic intensity", "04_inside_the_chip")],
    "zh_CN": [("屋顶线", "05_prefill_decode_roofline"), ("预填充", "05_prefill_decode_roofline"),
              ("键值缓存", "06_attention_kv_cache"), ("KV缓存", "06_attention_kv_cache"),
              ("算术强度", "04_inside_the_chip"), ("投机解码", "08_optimization_map"),
              ("张量并行", "07_multi_gpu"), ("流水线并行", "07_multi_gpu"), ("专家并行", "07_multi_gpu"),
              ("算力受限", "05_prefill_decode_roofline")],
}


# The queries each edition's search must answer with the chapter that teaches the term first
# (issue 47 found 预填充 ranking chapter 05 fifth, 投机解码 08 third, 分页注意力 the glossary last of
# nine, "KV cache" 06 third), with an excerpt that holds the query.
SEARCH_FIRST = {
    "en": {"prefill": "05_prefill_decode_roofline", "KV cache": "06_attention_kv_cache",
           "roofline": "05_prefill_decode_roofline", "tensor parallelism": "07_multi_gpu",
           "speculative decoding": "08_optimization_map"},
    "zh_CN": {"预填充": "05_prefill_decode_roofline", "投机解码": "08_optimization_map", "分页注意力": "glossary",
              "键值缓存": "06_attention_kv_cache", "屋顶线": "05_prefill_decode_roofline", "张量并行": "07_multi_gpu"},
}


@pytest.mark.parametrize("edition", list(EDITIONS))
def test_search_finds_and_ranks_the_books_terms(browser, server, edition):
    """Each edition's search, as typed in the browser, finds the chapter of each of the book's
    terms (Chinese multi-character terms included: the query is cut into the index's words), and
    for the terms of ``SEARCH_FIRST`` lists that chapter first, its excerpt holding the query
    (book/_ext/ldf_search.py: titles, headings, then how often a page uses the term)."""
    _require((SITE / EDITIONS[edition] / "search.html").is_file(), f"no search page for {edition}")
    missing, wrong = [], []
    v = _warm_visit(browser, server)
    try:
        queries = dict(SEARCH_TERMS[edition])
        for q, exp in SEARCH_FIRST[edition].items():
            queries.setdefault(q, exp)
        for query, expected in queries.items():
            page = v.open(f"{EDITIONS[edition]}search.html?q={query}", idle=False)
            # the search done: Sphinx lists its results one by one, each with an excerpt fetched
            # from the page; the first one's excerpt is all this test reads of them
            page.wait_for_function("""() => {
                const s = document.querySelector('#search-results .search-summary');
                return s && s.textContent.trim() !== '' && !document.querySelector('#search-results h2 span'); }""",
                                   timeout=TIMEOUT_MS)
            hrefs = page.eval_on_selector_all("ul.search li a", "els => els.map(e => e.getAttribute('href'))")
            if not any(expected in (h or "") for h in hrefs):
                missing.append(f"{query!r}: {expected} not among {len(hrefs)} results "
                               f"{[pathlib.PurePosixPath(urlsplit(h).path).stem for h in hrefs][:6]}")
            if query in SEARCH_FIRST[edition]:
                first = pathlib.PurePosixPath(urlsplit(hrefs[0]).path).stem if hrefs else None
                if first != SEARCH_FIRST[edition][query]:
                    wrong.append(f"{query!r}: first {first}, not {SEARCH_FIRST[edition][query]} "
                                 f"({[pathlib.PurePosixPath(urlsplit(h).path).stem for h in hrefs][:5]})")
                    continue
                page.wait_for_selector("ul.search li:first-child p.context", timeout=TIMEOUT_MS)
                excerpt = page.inner_text("ul.search li:first-child p.context")
                if query.lower() not in excerpt.lower():
                    wrong.append(f"{query!r}: the first result's excerpt lacks it: {excerpt[:120]!r}")
        assert not v.errors, v.errors
    finally:
        v.close()
    assert not missing and not wrong, f"{edition} search:\n  " + "\n  ".join(missing + wrong)


# A figure opened by a tap (ldf.js) shows at its natural size: its smallest text at least this.
MIN_ENLARGED_TEXT_PX = 10.0


def test_figures_enlarge_on_a_phone(browser, server):
    """On a 390 px phone a figure is drawn phone-sized (its text >= 11 px in the column:
    ``test_figures_sharp_and_legible``); a tap still opens it alone at its natural size, where the
    smallest text of every SVG figure of the book is >= 10 px (tick exponents, drawn at 0.7 of
    their label by TeX's rule, are counted at their label's size: see svg_text), with its close
    control on the screen.  Driven on the ch05 roofline: tap, the view opens, close."""
    pages = [p for p in _edition_pages("en") if p.startswith("notebooks/")]
    small = []
    for rel in _edition_pages("en") + _edition_pages("zh_CN"):
        html_text = (SITE / rel).read_text(encoding="utf-8")
        for src in re.findall(r'<img[^>]+src="([^"]+\.svg)"', html_text):
            path = (SITE / rel).parent / unquote(src)
            if not path.is_file() or "_images" not in src:
                continue
            vb, smallest = svg_text(path)
            if smallest is not None and vb and smallest * 4 / 3 < MIN_ENLARGED_TEXT_PX - 0.05:
                small.append(f"{rel}: {src}: {smallest * 4 / 3:.1f} px at natural size")
    assert not small, "\n".join(small)
    rel = next((p for p in pages if "05_" in p), pages[0] if pages else None)
    if rel is None:
        pytest.skip("no chapter page")
    v = _warm_visit(browser, server, "phone")
    try:
        page = v.open(rel)
        img = page.locator("article .cell_output img.ldf-zoomable").first
        img.scroll_into_view_if_needed()
        column = img.bounding_box()["width"]
        img.tap()
        page.wait_for_selector("dialog.ldf-figure-view[open] img", timeout=5_000)
        big = page.locator("dialog.ldf-figure-view img").bounding_box()["width"]
        natural = page.locator("dialog.ldf-figure-view img").evaluate("e => e.naturalWidth")
        assert big >= natural - 1 and big >= column, (column, big, natural)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "figure-enlarged-390.png"))
        # the close control on the screen, a 44 px target, even when the figure scrolls sideways
        page.locator("dialog.ldf-figure-view").evaluate("d => d.scrollLeft = d.scrollWidth")
        close = page.locator(".ldf-figure-close").bounding_box()
        vw = page.viewport_size["width"]
        assert close["x"] >= 0 and close["x"] + close["width"] <= vw and close["y"] >= 0, (close, vw)
        assert close["width"] >= 44 and close["height"] >= 44, close
        page.locator(".ldf-figure-close").tap()
        page.wait_for_function("() => !document.querySelector('dialog.ldf-figure-view')", timeout=5_000)
        assert not v.errors, v.errors
    finally:
        v.close()


def test_language_switch_keeps_the_section(browser, server):
    """Switching edition from the middle of a chapter opens the other edition at that section."""
    chapter = next((p for p in _edition_pages("en") if p.startswith("notebooks/05")), None)
    if chapter is None or not (SITE / "zh_CN" / chapter).is_file():
        pytest.skip("no chapter page in both editions")
    v = _warm_visit(browser, server)
    try:
        page = v.open(chapter)
        target = page.evaluate("""() => { const s = document.querySelectorAll('article section section[id]');
            const t = s[Math.min(2, s.length - 1)]; t.scrollIntoView(); return t.id; }""")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
        boxes = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('article section[id]'))
            .map(s => { const b = s.getBoundingClientRect(); return [s.id, [b.top, b.bottom]]; }))""")
        half = page.evaluate("() => window.innerHeight / 2")
        with page.expect_navigation(timeout=TIMEOUT_MS):
            page.locator("a.ldf-language").click()
        assert "zh_CN/" in page.url and "#" in page.url, (page.url, target)
        at = page.url.split("#", 1)[1]
        # a section the reader was looking at: it starts in the upper half of the window, or
        # holds the window's top
        assert at in boxes and boxes[at][0] <= half and boxes[at][1] > 0, (page.url, boxes.get(at), target)
        assert page.locator(f"[id='{at}']").count() == 1, f"no section {at} in the other edition"
        assert not v.errors, v.errors
    finally:
        v.close()
