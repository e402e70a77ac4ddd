"""Real-browser tests of the built web book (headless Debian Chromium driven by Playwright).

For every page, served by a local static server: no console error, no request to another host,
math typeset by MathJax, embedded widgets rendered, images loaded, calculators drawn; a
screenshot per page goes to ``artifacts/screenshots/`` (gitignored).  For one page per calculator
function, moving every control changes the shown values to what the package computes for that
setting.  The site also works from ``file://``.

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
import shutil
import threading
from urllib.parse import urlsplit

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("LDF_SITE_DIR", ROOT / "_build" / "html"))
SHOTS = ROOT / "artifacts" / "screenshots"
NOT_PAGES = ("_vendor", "_static", "_sources", "_images")
# Flags that keep Chromium off the network and quiet (see /work/shared/FACTS.md).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
TIMEOUT_MS = 30_000


def _require(condition: bool, why: str):
    if not condition:
        if os.environ.get("LDF_REQUIRE_SITE"):
            pytest.fail(why + " (LDF_REQUIRE_SITE is set)")
        pytest.skip(why)


def _chromium() -> str | None:
    for c in (os.environ.get("LDF_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if c and pathlib.Path(c).is_file():
            return c
    return None


def site_pages() -> list[str]:
    if not SITE.is_dir():
        return []
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                  if p.relative_to(SITE).parts[0] not in NOT_PAGES
                  and p.name not in ("genindex.html", "search.html", "index.html"))


@pytest.fixture(scope="module")
def browser():
    _require((SITE / "index.html").is_file(), f"no built site at {SITE} (bash tools/build_book.sh)")
    sync_api = pytest.importorskip("playwright.sync_api")
    exe = _chromium()
    _require(exe is not None, "Debian chromium not found (apt-get install -y chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server():
    """A plain static server of the site on 127.0.0.1 (an ephemeral port)."""
    _require((SITE / "index.html").is_file(), f"no built site at {SITE}")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class Visit:
    """Opens one page, recording console errors, page errors and requests to other hosts."""

    def __init__(self, browser, base: str):
        self.base = base
        self.page = browser.new_page(viewport={"width": 1200, "height": 900})
        self.errors: list[str] = []
        self.external: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        local = (url.startswith(("data:", "blob:", "about:")) or
                 (url.startswith("file://") and self.base.startswith("file://")) or
                 (not self.base.startswith("file://") and urlsplit(url).netloc == urlsplit(self.base).netloc))
        if local:
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def open(self, rel: str):
        self.page.goto(f"{self.base}/{rel}", wait_until="load", timeout=TIMEOUT_MS)
        try:   # best effort: the checks below wait for what matters (math, widgets, calculators)
            self.page.wait_for_load_state("networkidle", timeout=10_000)
        except Exception:
            pass
        return self.page

    def close(self):
        self.page.close()


def _typeset(page) -> None:
    """Wait for MathJax, then check every Sphinx math element holds rendered math."""
    n_math = page.locator(".math").count()
    if not n_math:
        return
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                           timeout=TIMEOUT_MS)
    page.evaluate("() => MathJax.startup.promise")
    raw = page.evaluate("""() => Array.from(document.querySelectorAll('.math'))
        .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))""")
    assert not raw, f"math left untypeset: {raw[:5]}"
    assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"


def _check_page(page) -> dict:
    _typeset(page)
    n_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if n_views:
        page.wait_for_function(
            "n => document.querySelectorAll('.jupyter-widgets, .widget-subarea > *').length >= n",
            arg=n_views, timeout=TIMEOUT_MS)
    n_calc = page.locator(".ldf-calc-static").count()
    if n_calc:
        page.wait_for_function("n => document.querySelectorAll('[data-ldf-ready]').length >= n",
                               arg=n_calc, timeout=TIMEOUT_MS)
    broken = page.evaluate("""() => Array.from(document.images)
        .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'))""")
    assert not broken, f"images that did not load: {broken}"
    return {"widgets": n_views, "calculators": n_calc}


@pytest.mark.parametrize("rel", site_pages() or ["(no site)"])
def test_page_loads_cleanly(browser, server, rel):
    if rel == "(no site)":
        _require(False, f"no built site at {SITE}")
    v = Visit(browser, server)
    try:
        page = v.open(rel)
        _check_page(page)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / (rel.replace("/", "__") + ".png")), full_page=True)
        assert not v.external, f"{rel} requested other hosts: {v.external}"
        assert not v.errors, f"{rel} console errors: {v.errors}"
    finally:
        v.close()


def _specs(rel: str) -> list[dict]:
    """The Vega-Lite specs of the static calculators on a page, in page order."""
    text = (SITE / rel).read_text(encoding="utf-8")
    return [json.loads(m.group(1).replace("<\\/", "</"))
            for m in re.finditer(r"spec = (\{.*?\});\n", text, re.S)]


def _calculators() -> dict[str, tuple[str, int]]:
    """{package function: (first page showing it, its index on the page)}."""
    found: dict[str, tuple[str, int]] = {}
    for rel in site_pages():
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
    """{row name: shown text} read from the SVG, rows matched by their vertical position."""
    return calc.evaluate("""el => {
        const rows = sel => Array.from(el.querySelectorAll(sel)).map(t => {
            const r = t.getBoundingClientRect(); return [Math.round(r.top + r.height / 2), t.textContent]; });
        const names = rows('g.role-axis-label text'), values = rows('g.values_marks text');
        const out = {};
        for (const [y, n] of names) {
            const hit = values.find(([yv]) => Math.abs(yv - y) <= 3);
            out[n] = hit ? hit[1] : null;
        }
        return out; }""")


def test_every_calculator_follows_its_controls(browser, server):
    """Move every control of one calculator per package function; the page shows fn's values."""
    from llm_dataflow import live

    calcs = _calculators()
    if not calcs:
        pytest.skip("no calculator on any built page")
    checked = 0
    for fn_path, (rel, i) in sorted(calcs.items()):
        fn = _package_function(fn_path)
        if fn is None:
            continue   # not an importable package function (notebooks define none)
        v = Visit(browser, server)
        try:
            page = v.open(rel)
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
            page.wait_for_timeout(200)
            after = _shown(calc)
            try:
                expected = {str(k): live._fmt(x) for k, x in fn(**params).items()}
            except Exception as e:   # the page shows the error the function raises
                expected = {"error": f"{type(e).__name__}: {e}"}
            for k, val in controls.items():
                assert after.get(f"{k} =") == live._fmt(params[k]), (fn_path, k, after)
            for k, text in expected.items():
                assert after.get(k) == text, f"{fn_path} on {rel} at {params}: {k!r} shows {after.get(k)!r}, package {text!r}"
            if any(len(x) > 1 for x in controls.values()):
                assert after != before, f"{fn_path}: moving the controls changed nothing"
            assert not v.errors, v.errors
            checked += 1
        finally:
            v.close()
    assert checked, "no calculator of an importable package function was found"


def test_site_works_from_file_urls(browser):
    """Opened straight from disk: pages with math, widgets and calculators still render."""
    _require((SITE / "index.html").is_file(), f"no built site at {SITE}")
    pages = site_pages()
    chosen = [p for p in pages if p.startswith("book/")][:1]
    calcs = _calculators()
    chosen += sorted({rel for rel, _ in calcs.values()})[:2]
    chosen += [p for p in pages if p.startswith("notebooks/")][:1]
    v = Visit(browser, SITE.resolve().as_uri())
    try:
        for rel in dict.fromkeys(chosen):
            page = v.open(rel)
            _check_page(page)
        assert not v.external, f"requests to other hosts from file://: {v.external}"
        assert not v.errors, f"console errors from file://: {v.errors}"
    finally:
        v.close()


def test_search_and_launch_buttons(browser, server):
    """The built-in search finds a glossary term; notebook pages offer launch and download links."""
    v = Visit(browser, server)
    try:
        page = v.open("search.html?q=prefill")
        page.wait_for_selector("#search-results li, ul.search li", timeout=TIMEOUT_MS)
        assert page.locator("ul.search li").count() >= 1
        nb = [p for p in site_pages() if p.startswith("notebooks/")]
        if nb:
            page = v.open(nb[0])
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            assert any(h.endswith(".ipynb") and "_sources/" in h for h in hrefs), "no notebook download"
            assert any("mybinder.org" in h or "colab.research.google.com" in h for h in hrefs), \
                "no launch button (repository.url / launch_buttons in _config.yml)"
        assert not v.external, v.external
    finally:
        v.close()


def test_dark_mode_keeps_calculators_and_figures_readable(browser, server):
    """In the dark theme, calculators keep their white card and dark text; figures get a light
    background from the theme.  Screenshots (dark) go to artifacts/screenshots/."""
    calcs = _calculators()
    pages = sorted({rel for rel, _ in calcs.values()})[:1] or [p for p in site_pages() if p.startswith("notebooks/")][:1]
    if not pages:
        pytest.skip("no notebook page")
    v = Visit(browser, server)
    try:
        v.page.emulate_media(color_scheme="dark")
        page = v.open(pages[0])
        page.evaluate("() => { localStorage.setItem('mode', 'dark'); }")
        page = v.open(pages[0])
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        _check_page(page)
        cards = page.eval_on_selector_all(".ldf-calc-card", """els => els.map(e => [
            getComputedStyle(e).backgroundColor, getComputedStyle(e).color])""")
        for bg, fg in cards:
            assert bg == "rgb(255, 255, 255)" and fg == "rgb(17, 17, 17)", (bg, fg)
        figs = page.eval_on_selector_all(".cell_output img", "els => els.map(e => getComputedStyle(e).backgroundColor)")
        assert all(bg not in ("rgba(0, 0, 0, 0)", "transparent") for bg in figs), figs
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / (pages[0].replace("/", "__") + ".dark.png")), full_page=True)
        assert not v.errors, v.errors
    finally:
        v.page.evaluate("() => localStorage.removeItem('mode')")
        v.close()
