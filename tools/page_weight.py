"""Report each built page's weight: its HTML plus the files only it loads (figures), excluding the
shared assets every page caches once (_static/, _vendor/, searchindex.js).

Usage:  python tools/page_weight.py [SITE_DIR] [--max-mb 2]
        (default SITE_DIR: _build/html; exit status 1 when a page exceeds the limit)

Sizes in MB = 1e6 bytes.  Target (issue 9): under 2 MB per page.
"""
from __future__ import annotations

import argparse
import html.parser
import pathlib
import sys
from urllib.parse import unquote, urlsplit

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ("_static", "_vendor")
NOT_PAGES = ("_static", "_vendor", "_sources", "_images")


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


def page_weight(site: pathlib.Path, page: pathlib.Path) -> tuple[int, int, int]:
    """(html bytes, bytes of page-specific files, bytes of shared files) of one page."""
    p = _Refs()
    p.feed(page.read_text(encoding="utf-8"))
    own = shared = 0
    for url in dict.fromkeys(p.urls):
        if "://" in url or url.startswith(("data:", "//")):
            continue
        target = (page.parent / unquote(urlsplit(url).path)).resolve()
        if not target.is_file():
            continue
        rel = target.relative_to(site.resolve()).parts
        if rel[0] in SHARED or target.name == "searchindex.js":
            shared += target.stat().st_size
        else:
            own += target.stat().st_size
    return page.stat().st_size, own, shared


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    ap.add_argument("--max-mb", type=float, default=2.0)
    args = ap.parse_args(argv)
    site = pathlib.Path(args.site)
    if not (site / "index.html").is_file():
        print(f"no built site at {site}; build with `bash tools/build_book.sh`", file=sys.stderr)
        return 2
    pages = sorted(p for p in site.rglob("*.html") if p.relative_to(site).parts[0] not in NOT_PAGES)
    over = 0
    print(f"{'page':48s} {'html MB':>8s} {'own files':>9s} {'total MB':>9s} {'shared MB':>9s}")
    for page in pages:
        h, own, shared = page_weight(site, page)
        total = (h + own) / 1e6
        flag = "  OVER" if total > args.max_mb else ""
        over += bool(flag)
        print(f"{page.relative_to(site).as_posix():48s} {h / 1e6:8.3f} {own / 1e6:9.3f} {total:9.3f} {shared / 1e6:9.3f}{flag}")
    vendor = sum(f.stat().st_size for f in (site / "_vendor").rglob("*") if f.is_file()) if (site / "_vendor").is_dir() else 0
    print(f"shared assets on disk: _static {sum(f.stat().st_size for f in (site / '_static').rglob('*') if f.is_file()) / 1e6:.1f} MB, "
          f"_vendor {vendor / 1e6:.1f} MB (each loaded once, then cached)")
    print(f"{len(pages)} pages, {over} over {args.max_mb} MB")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
