"""Report each built page's weight on a first visit (empty cache), read from the files on disk:
its HTML, the files only it loads (figures) and the shared files it loads (theme CSS/JS, fonts
the stylesheets name, _vendor/ libraries, searchindex.js).

Usage:  python tools/page_weight.py [SITE_DIR] [--max-mb 4] [--max-widget-mb 7]
        (default SITE_DIR: _build/html; exit status 1 when a page exceeds its limit)

Sizes in MB = 1e6 bytes, uncompressed.  Limits (issue 18): a page without an ipywidgets view
under 4 MB in all; a page that renders widget views loads the 3.6 MB widget manager and may
reach 7 MB.  Files a script fetches at run time (the Vega libraries of a calculator) are not
seen here; tests/test_browser.py::test_page_weight measures every byte a browser fetches.
"""
from __future__ import annotations

import argparse
import html.parser
import pathlib
import re
import sys
from urllib.parse import unquote, urlsplit

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ("_static", "_vendor")
NOT_PAGES = ("_static", "_vendor", "_sources", "_images")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class _Refs(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("img", "script", "source", "video", "audio", "iframe", "embed") and a.get("src"):
            self.urls.append(a["src"])
        elif tag == "link" and a.get("href") and set((a.get("rel") or "").split()) & {"stylesheet", "preload", "icon"}:
            self.urls.append(a["href"])


def _fonts(css: pathlib.Path) -> list[pathlib.Path]:
    """The woff2 fonts a stylesheet names (a browser fetches one format per face, woff2 first)."""
    text = css.read_text(encoding="utf-8", errors="replace")
    out = []
    for m in re.finditer(r"url\(\s*['\"]?([^'\")]+\.woff2)", text):
        f = (css.parent / unquote(urlsplit(m.group(1)).path)).resolve()
        if f.is_file():
            out.append(f)
    return out


def page_weight(site: pathlib.Path, page: pathlib.Path) -> tuple[int, int, int]:
    """(html bytes, bytes of page-specific files, bytes of shared files) of one page."""
    p = _Refs()
    p.feed(page.read_text(encoding="utf-8"))
    files: dict[pathlib.Path, None] = {}
    for url in p.urls:
        if "://" in url or url.startswith(("data:", "//")):
            continue
        target = (page.parent / unquote(urlsplit(url).path)).resolve()
        if target.is_file():
            files[target] = None
            if target.suffix == ".css":
                files.update(dict.fromkeys(_fonts(target)))
    own = shared = 0
    for target in files:
        rel = target.relative_to(site.resolve()).parts
        if rel[0] in SHARED or target.name == "searchindex.js":
            shared += target.stat().st_size
        else:
            own += target.stat().st_size
    return page.stat().st_size, own, shared


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    ap.add_argument("--max-mb", type=float, default=4.0)
    ap.add_argument("--max-widget-mb", type=float, default=7.0)
    args = ap.parse_args(argv)
    site = pathlib.Path(args.site)
    if not (site / "index.html").is_file():
        print(f"no built site at {site}; build with `bash tools/build_book.sh`", file=sys.stderr)
        return 2
    pages = sorted(p for p in site.rglob("*.html") if p.relative_to(site).parts[0] not in NOT_PAGES)
    over = 0
    print(f"{'page':45s} {'html MB':>8s} {'own MB':>7s} {'shared MB':>9s} {'total MB':>9s} widgets")
    for page in pages:
        h, own, shared = page_weight(site, page)
        total = (h + own + shared) / 1e6
        widgets = WIDGET_VIEW in page.read_text(encoding="utf-8")
        limit = args.max_widget_mb if widgets else args.max_mb
        flag = f"  OVER {limit} MB" if total > limit else ""
        over += bool(flag)
        print(f"{page.relative_to(site).as_posix():45s} {h / 1e6:8.3f} {own / 1e6:7.3f} {shared / 1e6:9.3f} "
              f"{total:9.3f} {'yes' if widgets else 'no':>7s}{flag}")
    print(f"{len(pages)} pages, {over} over their limit")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
