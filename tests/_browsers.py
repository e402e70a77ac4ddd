"""Helpers the real-browser tests share (tests/test_browser.py, tests/test_planner_page.py,
tests/test_jupyterlab.py): finding Chromium, skipping without it, a page visit that records errors
and requests, the checks every page of the site gets at each width (``check_page``, ``look``,
``layout_problems``, ``figure_problems``, ``wide_results``), the layout probes run in the page, and
a real mouse / touch drag of a slider."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
from urllib.parse import unquote, urlsplit

import pytest

TIMEOUT_MS = 30_000


def require(condition: bool, why: str):
    """Skip the test when ``condition`` is false — or fail it when ``LDF_REQUIRE_SITE`` is set (CI)."""
    if not condition:
        if os.environ.get("LDF_REQUIRE_SITE"):
            pytest.fail(why + " (LDF_REQUIRE_SITE is set)")
        pytest.skip(why)


def chromium() -> str | None:
    """Debian's chromium binary (``LDF_CHROMIUM`` overrides), or None; never a downloaded browser."""
    for c in (os.environ.get("LDF_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if c and pathlib.Path(c).is_file():
            return c
    return None


def is_local(url: str, base: str) -> bool:
    """True for a request that stays on the site at ``base``: a data:/blob:/about: URL, a file://
    URL from a page opened from disk, or the same host and port as ``base``."""
    return (url.startswith(("data:", "blob:", "about:")) or
            (url.startswith("file://") and base.startswith("file://")) or
            (not base.startswith("file://") and urlsplit(url).netloc == urlsplit(base).netloc))


class Visit:
    """Opens pages in a fresh browser context (empty cache), recording console errors, page
    errors, requests to other hosts and the bytes of every response."""

    def __init__(self, browser, base: str, width: int = 1280, color_scheme: str | None = None):
        self.base = base
        self.context = new_context(browser, width, color_scheme)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        self.bytes: dict[str, int] = {}
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("requestfinished", self._finished)
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if is_local(url, self.base):
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def _finished(self, request):
        try:
            size = request.sizes()["responseBodySize"]
        except Exception:   # a request without a response body (aborted, data: URL)
            size = 0
        url = request.url.split("#")[0]
        self.bytes[url] = max(self.bytes.get(url, 0), size)

    def open(self, rel: str, idle: bool = True):
        """Load ``rel``; with ``idle``, also wait (best effort) until no request has been open
        for 500 ms, so that every byte of the visit is counted. A test that waits for the
        elements it drives (``check_page``, a calculator's ``data-ldf-ready``) passes
        ``idle=False`` and saves that half second and more per page."""
        self.page.goto(f"{self.base}/{rel}", wait_until="load", timeout=TIMEOUT_MS)
        if idle:
            try:   # best effort: the checks below wait for what matters (widgets, calculators)
                self.page.wait_for_load_state("networkidle", timeout=10_000)
            except Exception:
                pass
        return self.page

    def close(self):
        self.context.close()


def new_context(browser, width: int = 1280, color_scheme: str | None = None):
    """A browser context at ``width`` CSS px (a phone below 600: mobile, touch, 844 px tall)."""
    phone = width < 600
    return browser.new_context(
        viewport={"width": width, "height": 844 if phone else 900}, is_mobile=phone, has_touch=phone,
        device_scale_factor=1, color_scheme=color_scheme)


# Every resource the document used, from the Resource Timing entries: {url: body bytes}. A
# resource served from the HTTP cache keeps its ``decodedBodySize``, so a page opened in a warm
# context reports what an empty cache would fetch from this (uncompressed) server.
RESOURCES_JS = r"""() => {
  const out = {};
  for (const e of performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))) {
    const url = e.name.split('#')[0];
    out[url] = Math.max(out[url] || 0, e.decodedBodySize || 0);
  }
  return out; }"""


class CachedVisit:
    """A page opened in a context that a worker keeps for one width (``context``), so the site's
    scripts, styles and fonts come from the HTTP cache and V8's code cache after the first page
    (the 29 weighed pages, opened and checked on 2 quiet cores: 57 s, against 85 s in a fresh
    context each). The context's requests are not intercepted
    (interception sends every request through this process); a request to another host is
    recorded as it starts (``external``) and fails in Chromium (``--host-resolver-rules`` in
    conftest.py maps every other host to nothing). ``bytes``: :meth:`resources`, read in the
    page, as a first visit would fetch them."""

    def __init__(self, context, base: str):
        self.base, self.context = base, context
        self.page = context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: None if is_local(r.url, self.base) else self.external.append(r.url))

    open = Visit.open

    def resources(self) -> dict[str, int]:
        return self.page.evaluate(RESOURCES_JS)

    def close(self):
        self.page.close()


# Boxes whose content a reader needs; each must fit the column or scroll with the affordance.
LAYOUT_JS = r"""(viewportWidth) => {
  const art = document.querySelector('article.bd-article') || document.querySelector('main');
  const cs = getComputedStyle(art), r = art.getBoundingClientRect();
  // the text column, with 6 px of slack (an inline code box's padding may reach into the margin)
  const L = r.left + parseFloat(cs.paddingLeft) - 6, R = r.right - parseFloat(cs.paddingRight) + 6;
  const where = el => {
    let h = null;
    for (let e = el; e && !h; e = e.previousElementSibling || e.parentElement) {
      const c = e.matches && e.matches('section') ? e.querySelector('h1, h2, h3') : null;
      if (e.matches && e.matches('h1, h2, h3')) h = e; else if (c) h = c;
    }
    const cls = (el.className && el.className.baseVal === undefined ? el.className : '') || '';
    return `${el.tagName.toLowerCase()}.${cls.split(' ').filter(Boolean).slice(0, 3).join('.')}` +
           ` "${(el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 50)}"` +
           (h ? ` (under "${h.textContent.replace(/[#¶]/g, '').trim().slice(0, 40)}")` : '');
  };
  const scrollBox = el => {
    for (let a = el; a && a !== art; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if ((o === 'auto' || o === 'scroll') && a.scrollWidth > a.clientWidth + 1) return a;
    }
    return null;
  };
  const isResult = el => !!el.closest('.cell_output, div.math, table, .ldf-calc-card');
  const sel = 'pre, table, div.math, mjx-container, img, svg, .ldf-calc-card, .cell_output .output, ' +
              'p, li, dt, dd, h1, h2, h3, h4, blockquote, .admonition, code';
  const cut = [], noCue = [], scrolls = [], squeezed = [], seen = new Set();
  for (const el of art.querySelectorAll(sel)) {
    if (!el.getClientRects().length || el.closest('#jb-print-docs-body, .bd-header-article, .ldf-skip')) continue;
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    const b = el.getBoundingClientRect();
    if (!b.width) continue;
    const box = scrollBox(el);
    if (box) {
      if (seen.has(box)) continue;
      seen.add(box);
      const bb = box.getBoundingClientRect(), hidden = box.scrollWidth - box.clientWidth;
      if (bb.right > R || bb.left < L) cut.push(`${where(box)}: its scrolling box is ${Math.round(Math.max(bb.right - R, L - bb.left))} px wider than the column`);
      else if (!box.classList.contains('ldf-scrolls') || getComputedStyle(box).boxShadow === 'none')
        noCue.push(`${where(box)}: ${hidden} px hidden, no scroll affordance`);
      scrolls.push({what: where(box), hidden: hidden, width: box.clientWidth, result: isResult(box),
                    code: !!box.closest('.cell_input, div.highlight') && !box.closest('.cell_output')});
      continue;
    }
    // a margin note ({margin}) sits beside the column by design: it must stay on the screen
    const [l, r] = el.closest('aside.margin') ? [0, viewportWidth] : [L, R];
    if (b.right > r || b.left < l) {
      cut.push(`${where(el)}: ${Math.round(Math.max(b.right - r, l - b.left))} px beyond the ${el.closest('aside.margin') ? 'screen' : 'column'}`);
      continue;
    }
    const o = getComputedStyle(el).overflowX;
    if ((o === 'hidden' || o === 'clip') && el.scrollWidth > el.clientWidth + 1)
      cut.push(`${where(el)}: ${el.scrollWidth - el.clientWidth} px clipped (overflow ${o})`);
  }
  // a table column squeezed to one word per line
  for (const cell of art.querySelectorAll('td, th')) {
    // Chinese breaks between any two characters; a Chinese word is about two characters
    const words = (cell.textContent || '').trim().split(/\s+/).flatMap(w => {
        const cjk = (w.match(/[\u3000-\u9fff\uff00-\uffef]/g) || []).length;
        return cjk ? Array(Math.ceil(cjk / 2)).fill(w) : (w.length > 1 ? [w] : []); })
      .concat(Array.from(cell.querySelectorAll('mjx-container')));   // a formula counts as a word
    if (words.length < 4 || !cell.getClientRects().length) continue;
    const tops = [], walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      const range = document.createRange(); range.selectNodeContents(t);
      for (const x of range.getClientRects()) if (x.width > 0) tops.push(x.top);
    }
    tops.sort((a, b) => a - b);
    const lines = tops.filter((t, i) => i === 0 || t - tops[i - 1] > 4).length;   // one per line box
    if (lines >= words.length) squeezed.push(`${where(cell)}: ${words.length} words on ${lines} lines`);
  }
  // a short code name split across two lines ("lin|k"; "--busy-|core" may break at its hyphen)
  const split = Array.from(art.querySelectorAll('code.literal')).filter(c => {
    const t = (c.textContent || '').trim();
    return t.length <= 24 && /^[A-Za-z0-9]+$/.test(t) && c.getClientRects().length > 1;
  }).map(c => where(c));
  // the links to the previous and next page: their text inside them (they hide what overflows)
  for (const a of document.querySelectorAll('.prev-next-area a')) {
    const A = a.getBoundingClientRect();
    for (const e of a.querySelectorAll('p, .prev-next-info')) {
      const b = e.getBoundingClientRect();
      if (b.width && (b.right > A.right + 0.5 || b.left < A.left - 0.5))
        cut.push(`${where(e)}: ${Math.round(Math.max(b.right - A.right, A.left - b.left))} px outside its link`);
    }
  }
  // against the configured width: a phone's visual viewport grows to fit a page that is too wide
  const page = document.scrollingElement.scrollWidth - viewportWidth;
  return {cut, noCue, scrolls, squeezed, split, pageOverflow: page > 1 ? page : 0};
}"""


def svg_text(src_path: pathlib.Path) -> tuple[float, float | None]:
    """(viewBox width, smallest text size in viewBox units, or None when text is outlined).

    A <text> element's size is its largest: matplotlib's mathtext writes "10^{14}" as one <text>
    whose exponent tspan is 0.7 of the base size, by design of TeX-style scripts."""
    text = src_path.read_text(encoding="utf-8", errors="replace")
    m = re.search(r'viewBox="[-0-9.e]+\s+[-0-9.e]+\s+([0-9.e]+)\s+[0-9.e]+"', text)
    vb = float(m.group(1)) if m else None
    if vb is None:
        m = re.search(r'<svg[^>]*\swidth="([0-9.]+)(?:pt|px)?"', text)
        vb = float(m.group(1)) if m else 0.0
    size = re.compile(r'font-size(?::\s*|=")([0-9.]+)')
    bases = []
    for block in re.findall(r"<text\b.*?</text>", text, re.S):
        sizes = [float(x) for x in size.findall(block)]
        if sizes:
            bases.append(max(sizes))
    return vb, (min(bases) if bases else None)


# --- the checks every page of the site gets at each width: tests/test_browser.py, and
# tests/test_planner_page.py on its own visits of the planner page ----------------------------

WIDTHS = {"desktop": 1280, "phone": 390}
# Smallest figure text, in CSS px, as drawn at each width (matplotlib's default 10 pt ticks on a
# 90 dpi PNG were 6-7 px on the desktop and ~4 px on a phone; 6.4 in SVGs showed 8.6 px on a
# phone): llm_dataflow.figures draws every figure phone-sized, its 11 pt text at >= 11 px in a
# 390 px phone's column (a notebook executed before that change still fails here).
MIN_FIGURE_TEXT_PX = {"desktop": 11.0, "phone": 11.0}
MIN_PNG_DENSITY = 2.0           # image pixels per CSS pixel


def typeset(page) -> None:
    """Every Sphinx math element holds rendered math: SVG written at build time (book/_ext/
    ldf_math.py) or, on a site built without Node.js, typeset by MathJax in the page."""
    if not page.locator(".math").count():
        return
    if page.evaluate("() => !!document.querySelector('script[src*=\"mathjax\" i]')"):
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                               timeout=TIMEOUT_MS)
        page.evaluate("() => MathJax.startup.promise")
    raw = page.evaluate("""() => Array.from(document.querySelectorAll('.math'))
        .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60))""")
    assert not raw, f"math left as TeX: {raw[:5]}"
    assert page.locator("mjx-merror, [data-mjx-error]").count() == 0, "a formula shows a TeX error"


def check_page(page) -> dict:
    """Wait for what a page draws late, then check it as loaded: math rendered (``typeset``),
    every embedded widget view drawn, every static calculator ready (``data-ldf-ready``), the
    web planner's first plan and chart drawn, every image loaded.

    Returns ``{"widgets": n, "calculators": n}`` (counts on the page).  Raises AssertionError
    naming what did not load; a Playwright TimeoutError when something never appears (30 s; the
    planner, which starts Pyodide, 120 s)."""
    typeset(page)
    n_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if n_views:
        page.wait_for_function(
            "n => document.querySelectorAll('.jupyter-widgets, .widget-subarea > *').length >= n",
            arg=n_views, timeout=TIMEOUT_MS)
    n_calc = page.locator(".ldf-calc-static").count()
    if n_calc:
        page.wait_for_function("n => document.querySelectorAll('[data-ldf-ready]').length >= n",
                               arg=n_calc, timeout=TIMEOUT_MS)
    if page.locator(".ldf-planner").count():
        # the web planner (Pyodide): its first plan, bar and chart drawn, so that the layout
        # checks see them (tests/test_planner_page.py checks what they show)
        page.wait_for_function("""() => { const d = document.querySelector('.ldf-planner').dataset;
            return ['failed', 'unavailable'].includes(d.ldfState)
                || (!!d.ldfReady && (d.ldfState === 'error' || d.ldfChart === d.ldfRuns)); }""",
                               timeout=120_000)
    broken = page.evaluate("""() => Array.from(document.images)
        .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'))""")
    assert not broken, f"images that did not load: {broken}"
    return {"widgets": n_views, "calculators": n_calc}


FIGURES_JS = r"""() => Array.from(document.querySelectorAll('article img')).filter(i => i.getClientRects().length)
  .map(i => ({src: i.getAttribute('src'), natural: i.naturalWidth, shown: i.getBoundingClientRect().width}))"""


def figure_problems(site: pathlib.Path, rel: str, width: str, figures: list[dict]) -> list[str]:
    """What makes the figures ``FIGURES_JS`` read from page ``rel`` of ``site`` blurred or too small to
    read at ``width`` (a key of ``WIDTHS``): an SVG's smallest text under ``MIN_FIGURE_TEXT_PX``,
    a raster under ``MIN_PNG_DENSITY`` image pixels per CSS pixel."""
    out = []
    for f in figures:
        src = f["src"] or ""
        if src.startswith("data:") or f["shown"] < 1:
            continue
        path = (site / rel).parent / unquote(urlsplit(src).path)
        if src.lower().split("?")[0].endswith(".svg"):
            if not path.is_file():
                continue
            vb, smallest = svg_text(path)
            if smallest is not None and vb:
                px = smallest * f["shown"] / vb
                if px < MIN_FIGURE_TEXT_PX[width] - 0.05:
                    out.append(f"{src}: smallest text {px:.1f} px at {WIDTHS[width]} px "
                               f"(< {MIN_FIGURE_TEXT_PX[width]} px)")
        else:
            density = f["natural"] / f["shown"]
            if density < MIN_PNG_DENSITY - 0.01:
                out.append(f"{src}: raster at {density:.2f} image px per CSS px (< {MIN_PNG_DENSITY}); "
                           "use SVG (ldf.use_book_style()) or a denser PNG")
    return out


def layout_problems(lay: dict, width: str) -> list[str]:
    """What ``LAYOUT_JS`` found wrong on a page at ``width`` (a key of ``WIDTHS``): boxes cut off,
    scrolling without the cue, squeezed tables, short code names split, the page scrolling sideways."""
    problems = ([f"cut off: {c}" for c in lay["cut"]] + [f"no scroll cue: {c}" for c in lay["noCue"]]
                + [f"squeezed: {c}" for c in lay["squeezed"]]
                + [f"a short code name split over two lines: {c}" for c in lay["split"]])
    if lay["pageOverflow"]:
        problems.append(f"the page scrolls sideways by {lay['pageOverflow']} px")
    return problems


def wide_results(lay: dict) -> list[str]:
    """Results (outputs, tables, display equations; not code) that scroll at all in the layout
    ``LAYOUT_JS`` read: at 1280 px each must be seen whole."""
    return [f"{s['what']}: {s['hidden']} px of {s['width'] + s['hidden']} px hidden"
            for s in lay["scrolls"] if s["result"] and not s["code"] and s["hidden"] > 6]   # > its padding


def look(page, site: pathlib.Path, rel: str, width: str) -> dict:
    """The page's layout (``LAYOUT_JS``) and figure problems once ``ldf.js`` has marked the boxes
    that scroll: two animation frames (a resize of the last layout has reached its
    ResizeObserver, which marks again 100 ms later), then no marking pending."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_function("""() => { const e = document.documentElement;
        return e.hasAttribute('data-ldf-scroll-marked') && !e.hasAttribute('data-ldf-mark-pending'); }""",
                           timeout=TIMEOUT_MS)
    return {"layout": page.evaluate(LAYOUT_JS, WIDTHS[width]),
            "figures": figure_problems(site, rel, width, page.evaluate(FIGURES_JS))}


# The state of control ``a`` of a calculator: the slider's index, its readout, the row's echo.
CONTROL_JS = """(el, a) => {
  const input = el.querySelector(`[name="p${a}"]`);
  const out = input.parentNode.querySelector('output');
  const row = el.querySelectorAll('table.ldf-calc-rows tr.ldf-ctl')[a];
  return {index: Number(input.value), readout: out ? out.textContent : null,
          echo: row ? row.cells[1].textContent : null};
}"""

# Everything of a card a reader must see whole: rows, controls, the card itself.
CALC_LAYOUT_JS = """el => {
  const card = el.closest('.ldf-calc-card'), art = document.querySelector('article.bd-article') || document.body;
  const cs = getComputedStyle(art), r = art.getBoundingClientRect();
  const right = r.right - parseFloat(cs.paddingRight) + 1, c = card.getBoundingClientRect();
  const clipped = [];
  for (const e of [card, el, ...el.querySelectorAll('table.ldf-calc-rows td, .vega-bind, .ldf-calc-title')])
    if (e.scrollWidth > e.clientWidth + 1)
      clipped.push(`${e.tagName.toLowerCase()} "${e.textContent.trim().slice(0, 60)}": ${e.scrollWidth - e.clientWidth} px hidden`);
  if (c.right > right) clipped.push(`the card reaches ${Math.round(c.right - right)} px past the column`);
  const targets = Array.from(el.querySelectorAll('input, select')).map(i => {
    const b = i.getBoundingClientRect(), n = i.type === 'range' ? Number(i.max) - Number(i.min) : 0;
    return {name: i.name, kind: i.type, height: b.height, step: n ? b.width / n : null};
  });
  const values = Array.from(el.querySelectorAll('table.ldf-calc-rows tr:not(.ldf-ctl)'))
    .map(tr => [tr.cells[0].textContent, tr.cells[1].textContent]);
  return {clipped, targets, values};
}"""


# Where a slider is, scrolled into view first if it is not (one round trip instead of five), or if
# something else is drawn over its middle (the theme's sticky header over a slider at the top edge:
# a reader scrolls before touching it).
TRACK_JS = """e => { let b = e.getBoundingClientRect();
  const covered = () => { const h = document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
                          return !(h === e || e.contains(h)); };
  if (b.top < 0 || b.bottom > innerHeight || covered()) {
    e.scrollIntoView({block: 'center'}); b = e.getBoundingClientRect(); }
  return {x: b.x, y: b.y, width: b.width, height: b.height, lo: +e.min, hi: +e.max, cur: +e.value}; }"""


def drag(page, input_el, frac: float, touch: bool, cdp=None) -> None:
    """Drag a slider to ``frac`` of its track: the mouse (press on the track, move, release) or a
    finger (touch start, move, end through Chromium's input pipeline), never a value set by
    script: Vega's own handlers and the trailing ``change`` event run as for a reader.
    ``input_el``: a locator or element handle; ``cdp``: a CDP session of ``page`` to reuse for
    a touch drag (else one is opened and closed)."""
    t = input_el.evaluate(TRACK_JS)
    lo, hi, cur = t["lo"], t["hi"], t["cur"]
    if round(lo + frac * (hi - lo)) == cur:   # already there: drag somewhere else
        frac = 0.9 if cur - lo < (hi - lo) / 2 else 0.1
    pad = 8   # the thumb's half width: the track's ends are this far inside the box
    # press on the track a little before the target (the thumb jumps there), drag on to it
    x1 = t["x"] + pad + (t["width"] - 2 * pad) * frac
    x0 = x1 - 0.25 * (t["width"] - 2 * pad) / max(hi - lo, 1) * (1 if frac > 0.5 else -1)
    y = t["y"] + t["height"] / 2
    if not touch:
        page.mouse.move(x0, y)
        page.mouse.down()
        page.mouse.move(x1, y, steps=6)
        page.mouse.up()
        return
    session = cdp or page.context.new_cdp_session(page)
    try:
        session.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x0, "y": y}]})
        for i in range(1, 7):
            session.send("Input.dispatchTouchEvent",
                         {"type": "touchMove", "touchPoints": [{"x": x0 + (x1 - x0) * i / 6, "y": y}]})
        session.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    finally:
        if cdp is None:
            session.detach()
