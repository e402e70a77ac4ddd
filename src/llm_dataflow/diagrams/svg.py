"""A small SVG canvas for the book's diagrams of ideas (data paths, shapes, block tables).

A diagram is drawn once per language: the same geometry, its labels in English or 简体中文.  The
canvas enforces what the book promises of a figure on a phone:

* the book column is about :data:`PHONE_COLUMN_PX` = 358 CSS px wide on a 390 px phone; a diagram
  ``width`` px wide is shown there at ``358 / width`` of its size, so every text of ``size`` px
  must satisfy ``size × 358 / width ≥`` :data:`MIN_PHONE_TEXT_PX` (11 px).  :meth:`Canvas.svg`
  raises ``ValueError`` for a text that would show smaller;
* a label must fit the box it is drawn in (:meth:`Canvas.box` estimates its width with
  :func:`text_width`: CJK characters 1 em, Latin about 0.6 em) and raises ``ValueError`` if not;
* the diagram has an opaque white background, so it reads the same in the book's dark theme;
* the output is deterministic (no ids, no dates): re-running gives the same bytes.

Coordinates are CSS px at the diagram's natural size (``viewBox`` = ``0 0 width height``).
"""
from __future__ import annotations

import html
import math

__all__ = ["Canvas", "PALETTE", "PHONE_COLUMN_PX", "MIN_PHONE_TEXT_PX", "LANGS", "text_width", "pick"]

#: The book's text column on a 390 px phone (px), and the smallest text a diagram may show there.
PHONE_COLUMN_PX = 358
MIN_PHONE_TEXT_PX = 11.0
#: The languages a diagram is drawn in: the English edition and the 简体中文 edition.
LANGS = ("en", "zh_CN")

#: Fill and stroke colours, each with at least 3:1 contrast against white for strokes and text
#: (WCAG 2.1, 1.4.11 non-text contrast): one hue per tier or role, used the same in every diagram.
PALETTE = {
    "storage": "#6b4f2a",   # brown: disks and file systems
    "host": "#8a5a00",      # amber: host DRAM and the CPU
    "link": "#5b5b5b",      # grey: PCIe, NVLink, network
    "hbm": "#1f4e79",       # dark blue: device memory
    "l2": "#2e7d32",        # green: L2
    "smem": "#6a1b9a",      # purple: shared memory / L1
    "reg": "#b71c1c",       # red: registers, TMEM, tensor cores
    "compute": "#b71c1c",
    "text": "#1a1a1a",
    "muted": "#595959",     # 7:1 on white
    "fill_light": "#f2f5f9",
    "accent": "#c2410c",    # orange: the thing the diagram points at
}

_FONT = ("-apple-system, 'Segoe UI', 'Noto Sans', 'Noto Sans CJK SC', 'PingFang SC', "
         "'Microsoft YaHei', 'Helvetica Neue', Arial, sans-serif")
_MONO = "ui-monospace, 'SFMono-Regular', Menlo, Consolas, 'Noto Sans Mono', monospace"


def pick(lang: str, en: str, zh: str) -> str:
    """``en`` or ``zh`` for ``lang`` (``"en"`` or ``"zh_CN"``); anything else is a ``ValueError``."""
    if lang == "en":
        return en
    if lang == "zh_CN":
        return zh
    raise ValueError(f"lang={lang!r} is not allowed; allowed: {', '.join(LANGS)}")


def _is_wide(ch: str) -> bool:
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF) or (0xF900 <= o <= 0xFAFF) or (0xFF00 <= o <= 0xFFEF) or (0x3000 <= o <= 0x303F)


def text_width(text: str, size: float, *, mono: bool = False) -> float:
    """Estimated width in px of one line of ``text`` at font ``size`` px: CJK and full-width
    characters 1 em, digits and Latin letters about 0.6 em (0.62 em monospace), spaces 0.3 em.
    An estimate (fonts differ): keep 10 % slack around a label."""
    w = 0.0
    for ch in text:
        if _is_wide(ch):
            w += 1.0
        elif ch == " ":
            w += 0.3
        elif mono:
            w += 0.62
        elif ch in "il.,:;|!'()[]":
            w += 0.32
        elif ch in "MWmw@%×":
            w += 0.85
        else:
            w += 0.6
    return w * size


class Canvas:
    """An SVG drawing ``width`` × ``height`` px; methods add shapes, :meth:`svg` returns the text.

    Args:
        width, height: natural size in CSS px (> 0).
        lang: ``"en"`` or ``"zh_CN"``: recorded in the SVG's ``xml:lang``.
        title: the diagram's accessible name (``<title>``), in ``lang``.

    Raises:
        ValueError: a non-positive size, an unknown ``lang``, an empty ``title``.
    """

    def __init__(self, width: float, height: float, *, lang: str = "en", title: str):
        if not (width > 0 and height > 0):
            raise ValueError(f"width={width!r}, height={height!r}: both must be > 0 px")
        pick(lang, "", "")
        if not title:
            raise ValueError("title='' is not allowed: a diagram needs an accessible name")
        self.width, self.height, self.lang, self.title = float(width), float(height), lang, title
        self._items: list[str] = []
        self._min_text: tuple[float, str] | None = None
        self._markers: set[str] = set()

    # -- shapes ---------------------------------------------------------------------------------
    def rect(self, x, y, w, h, *, fill="none", stroke=PALETTE["text"], width=1.5, rx=4, dash=None) -> None:
        """A rectangle with its top-left corner at (x, y)."""
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self._items.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}" rx="{_n(rx)}" '
                           f'fill="{fill}" stroke="{stroke}" stroke-width="{_n(width)}"{d}/>')

    def line(self, x1, y1, x2, y2, *, stroke=PALETTE["text"], width=1.5, dash=None, arrow: str = "") -> None:
        """A straight line; ``arrow`` is ``""``, ``"end"``, ``"start"`` or ``"both"``."""
        if arrow not in ("", "end", "start", "both"):
            raise ValueError(f"arrow={arrow!r} is not allowed; allowed: '', 'end', 'start', 'both'")
        mid = self._marker(stroke) if arrow else ""
        m = ""
        if arrow in ("end", "both"):
            m += f' marker-end="url(#{mid})"'
        if arrow in ("start", "both"):
            m += f' marker-start="url(#{mid})"'
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self._items.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{stroke}" '
                           f'stroke-width="{_n(width)}"{d}{m}/>')

    def path(self, d: str, *, stroke=PALETTE["text"], fill="none", width=1.5, arrow: str = "", dash=None) -> None:
        """An SVG path (``d`` in SVG path syntax); ``arrow`` as for :meth:`line`."""
        if arrow not in ("", "end", "start", "both"):
            raise ValueError(f"arrow={arrow!r} is not allowed; allowed: '', 'end', 'start', 'both'")
        mid = self._marker(stroke) if arrow else ""
        m = (f' marker-end="url(#{mid})"' if arrow in ("end", "both") else "") + \
            (f' marker-start="url(#{mid})"' if arrow in ("start", "both") else "")
        ds = f' stroke-dasharray="{dash}"' if dash else ""
        self._items.append(f'<path d="{html.escape(d)}" fill="{fill}" stroke="{stroke}" '
                           f'stroke-width="{_n(width)}"{ds}{m}/>')

    def text(self, x, y, s: str, *, size=14.0, anchor="start", weight="normal", fill=PALETTE["text"],
             mono: bool = False, italic: bool = False) -> None:
        """Text whose baseline starts (``anchor`` start / middle / end) at (x, y); ``\\n`` breaks
        lines, 1.25 em apart.  Checked by :meth:`svg` against the phone's smallest text."""
        if anchor not in ("start", "middle", "end"):
            raise ValueError(f"anchor={anchor!r} is not allowed; allowed: start, middle, end")
        if self._min_text is None or size < self._min_text[0]:
            self._min_text = (float(size), s)
        fam = _MONO if mono else _FONT
        style = ' font-style="italic"' if italic else ""
        lines = s.split("\n")
        if len(lines) == 1:
            body = html.escape(s)
        else:
            body = "".join(f'<tspan x="{_n(x)}" dy="{0 if i == 0 else _n(1.25 * size)}">{html.escape(t)}</tspan>'
                           for i, t in enumerate(lines))
        self._items.append(f'<text x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}" text-anchor="{anchor}" '
                           f'font-weight="{weight}" fill="{fill}" font-family="{html.escape(fam)}"{style}>'
                           f'{body}</text>')

    def box(self, x, y, w, h, label: str = "", *, size=14.0, stroke=PALETTE["text"], fill="#ffffff",
            weight="normal", text_fill=None, mono=False, rx=4, dash=None, width=1.5) -> None:
        """A rectangle with ``label`` centred in it (lines split on ``\\n``).

        Raises:
            ValueError: the label's estimated width (:func:`text_width`) exceeds ``w`` − 8 px, or its
                lines' height exceeds ``h``.
        """
        self.rect(x, y, w, h, fill=fill, stroke=stroke, rx=rx, dash=dash, width=width)
        if not label:
            return
        lines = label.split("\n")
        widest = max(text_width(t, size, mono=mono) for t in lines)
        if widest > w - 8:
            raise ValueError(f"label {label!r} is about {widest:.0f} px wide at {size} px; "
                             f"the box is {w} px wide (allowed: at most w - 8 = {w - 8:.0f})")
        block = size * (1.25 * (len(lines) - 1) + 1.0)
        if block > h:
            raise ValueError(f"label {label!r} is about {block:.0f} px tall; the box is {h} px tall")
        y0 = y + h / 2 - block / 2 + 0.8 * size
        self.text(x + w / 2, y0, label, size=size, anchor="middle", weight=weight,
                  fill=text_fill or PALETTE["text"], mono=mono)

    # -- output ---------------------------------------------------------------------------------
    def svg(self) -> str:
        """The SVG document (UTF-8 text).

        Raises:
            ValueError: a text would show under :data:`MIN_PHONE_TEXT_PX` px in the phone column.
        """
        scale = min(1.0, PHONE_COLUMN_PX / self.width)
        if self._min_text is not None and self._min_text[0] * scale < MIN_PHONE_TEXT_PX - 1e-9:
            size, s = self._min_text
            need = math.ceil(MIN_PHONE_TEXT_PX / scale * 10) / 10
            raise ValueError(f"text {s!r} at {size} px shows at {size * scale:.1f} px on a 390 px phone "
                             f"(diagram {self.width:.0f} px wide, shown at {scale:.2f}); allowed: at least "
                             f"{need} px at this width, or a narrower diagram")
        defs = "".join(
            f'<marker id="{mid}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
            for mid, colour in sorted((self._marker_id(c), c) for c in self._markers))
        w, h = _n(self.width), _n(self.height)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                f'xml:lang="{self.lang.replace("_", "-")}" role="img">\n'
                f'<title>{html.escape(self.title)}</title>\n'
                + (f"<defs>{defs}</defs>\n" if defs else "")
                + f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>\n'
                + "\n".join(self._items) + "\n</svg>\n")

    # -- internals ------------------------------------------------------------------------------
    @staticmethod
    def _marker_id(colour: str) -> str:
        return "arrow-" + colour.lstrip("#")

    def _marker(self, colour: str) -> str:
        self._markers.add(colour)
        return self._marker_id(colour)


def _n(v) -> str:
    """A coordinate written short and deterministic: at most 2 decimals, no trailing zeros."""
    s = f"{float(v):.2f}".rstrip("0").rstrip(".")
    return "0" if s == "-0" else s
