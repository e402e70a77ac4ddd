"""How the chapters' prose reads: words per sentence, long sentences, parentheses per 100 words.

    .venv/bin/python tools/prose_stats.py                 # every chapter, one row each
    .venv/bin/python tools/prose_stats.py notebooks/05_prefill_decode_roofline.ipynb --long 40
                                                         # one chapter, and its sentences over 40 words

What counts (the markdown cells of a notebook, as a reader meets them on the page):

* prose: paragraphs, list items, footnotes, admonitions and folded ``{dropdown}`` boxes (a caveat
  moved off the main line still has to read well);
* left out: fenced code, display math (``$$…$$``), tables (lines starting with ``|``), headings,
  directive fences and their ``:option:`` lines, HTML comments and images; inline math and inline
  code count as one word each; a ``{term}`` role counts as its shown text, a ``{cite}`` as nothing;
* a sentence ends at ``.``, ``!`` or ``?`` followed by a space and a capital, digit, quote or
  bracket (common abbreviations such as "e.g." and "vs." are not ends); a paragraph or list item
  that ends without a full stop is one sentence;
* a word is a whitespace-separated token holding a letter or digit.

``tests/test_prose.py`` holds every chapter to the book's targets: at most 22 words per sentence on
average and at most 2 % of sentences over 50 words.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_MEAN_WORDS, MAX_LONG_SHARE, LONG = 22.0, 0.02, 50

_ABBREV = ("e.g.", "i.e.", "vs.", "etc.", "cf.", "Fig.", "al.", "approx.", "Eq.", "No.", "resp.")
_END = re.compile(r"(?<=[.!?])[\"”’)\]*_]*\s+(?=[A-Z0-9\"“‘(\[*_`${])")


@dataclass
class Stats:
    sentences: list[str]
    words: int
    parens: int

    @property
    def mean(self) -> float:
        return self.words / max(1, len(self.sentences))

    def long(self, n: int = LONG) -> list[str]:
        return [s for s in self.sentences if _nwords(s) > n]

    @property
    def long_share(self) -> float:
        return len(self.long()) / max(1, len(self.sentences))

    @property
    def parens_per_100(self) -> float:
        return 100 * self.parens / max(1, self.words)


def _nwords(s: str) -> int:
    return sum(1 for t in s.split() if re.search(r"[A-Za-z0-9]", t))


def _clean_inline(s: str) -> str:
    s = re.sub(r"<!--.*?-->", " ", s, flags=re.S)
    s = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", s)                      # images
    s = re.sub(r"\{cite(:\w+)?\}`[^`]*`", "", s)                      # citations
    s = re.sub(r"\{(term|ref|doc|numref)\}`([^`<]*?)\s*(<[^>]*>)?`", r"\2", s)   # roles: shown text
    s = re.sub(r"\{[a-z]+\}`([^`]*)`", r"\1", s)
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)                    # links: their text
    s = re.sub(r"``[^`]+``|`[^`]+`", "CODE", s)                        # inline code: one word
    s = re.sub(r"(?<!\$)\$[^$\n]+\$(?!\$)", "MATH", s)                 # inline math: one word
    s = re.sub(r"\[\^[^\]]+\]:?", "", s)                               # footnote marks
    return s


def _blocks(md: str) -> list[str]:
    """The prose blocks (paragraphs, list items) of one markdown cell."""
    md = re.sub(r"<!--.*?-->", "", md, flags=re.S)
    md = re.sub(r"\$\$.*?\$\$", "\n\n", md, flags=re.S)
    out, cur, fence = [], [], None
    for line in md.split("\n"):
        st = line.strip()
        m = re.match(r"^(`{3,}|~{3,}|:{3,})(.*)$", st)
        if m:
            tick, rest = m.group(1), m.group(2).strip()
            if fence is None:
                fence = (tick, rest.startswith("{"))        # a directive's body is prose, code is not
            elif st == fence[0] or (st.startswith(fence[0][0]) and not rest):
                fence = None
            cur and out.append(" ".join(cur)); cur = []
            continue
        if fence is not None and not fence[1]:
            continue                                         # inside a code block
        if fence is not None and re.match(r"^:[\w-]+:", st):
            continue                                         # a directive's option line
        if not st or st.startswith("|") or st.startswith("#") or st.startswith("```"):
            cur and out.append(" ".join(cur)); cur = []
            continue
        if re.match(r"^([-*+]|\d+\.)\s+", st) or re.match(r"^\[\^[^\]]+\]:", st):
            cur and out.append(" ".join(cur)); cur = []
            st = re.sub(r"^([-*+]|\d+\.)\s+", "", st)
        cur.append(st)
    cur and out.append(" ".join(cur))
    return out


def _sentences(block: str) -> list[str]:
    text = _clean_inline(block)
    for a in _ABBREV:
        text = text.replace(a, a.replace(".", "\u2024"))   # one-dot leader: not a sentence end
    parts = [p.replace("\u2024", ".").strip() for p in _END.split(text)]
    return [p for p in parts if _nwords(p)]


def notebook_stats(path: str | Path) -> Stats:
    """The prose statistics of one notebook's markdown cells (see the module docstring)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    sentences, parens = [], 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for block in _blocks("".join(cell["source"])):
            ss = _sentences(block)
            sentences += ss
            parens += sum(s.count("(") for s in ss)
    return Stats(sentences, sum(_nwords(s) for s in sentences), parens)


def main(argv: list[str]) -> int:
    long_n = LONG
    if "--long" in argv:
        i = argv.index("--long")
        long_n = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    paths = [Path(a) for a in argv] or CHAPTERS
    print(f"{'chapter':34s} {'sent.':>6s} {'words/sent.':>11s} {'>50 words':>9s} {'( per 100 w':>11s}")
    for p in paths:
        s = notebook_stats(p)
        print(f"{p.stem:34s} {len(s.sentences):6d} {s.mean:11.1f} {s.long_share:9.1%} {s.parens_per_100:11.2f}")
        if argv:
            for sent in s.long(long_n):
                print(f"  [{_nwords(sent)}] {sent}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
