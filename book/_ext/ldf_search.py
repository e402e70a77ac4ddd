"""The book's search: results ranked by where and how often a page uses the query, in both editions.

Sphinx's own search scores a page 15 when a query word is in any of its headings and 5 when it is
in its text, and sorts ties by name: every chapter that mentions "prefill" in one heading ties
with the chapter about prefill, and the list comes out in chapter order.  This extension gives the
browser what it needs to rank by title, headings and term frequency, and a scorer that does:

* **Term counts.**  For each page, as Sphinx indexes it (``html-page-context`` gets the doctree
  Sphinx's ``IndexBuilder.feed`` just read), the words of its text and titles are collected with
  Sphinx's own ``WordCollector`` and the edition's own splitter and stemmer (jieba for Chinese),
  and counted.  At the end of the build the counts of the words the index holds are added to
  ``searchindex.js`` as ``ldf_tf`` (``{word: [[page, count], ...]}``, counts of 2 or more: a
  page the index lists for a word uses it at least once).
* **Chinese terms as words.**  jieba splits 预填充 into 预 + 填充 and 分页注意力 into 分页 +
  注意力, so a query for the term matched every page with 填充 (or with both halves anywhere).
  The Chinese names of the glossary's terms (``book/glossary.md`` through
  ``locale/zh_CN/LC_MESSAGES/book/glossary.po``) are given to jieba as a user dictionary
  (``html_search_options["dict"]``, Sphinx's ``SearchChinese``): a page is indexed under 分页注意力
  only where the term is written whole.
* **The scorer** (``ldf_search_scorer.js``, Sphinx's ``html_search_scorer``, loaded by the search
  page only): a page whose title holds the whole query first, then one with a heading holding it,
  then by how often the page uses the query's rarest word (log scale); Sphinx's score breaks ties.
  In the Chinese edition a glossary term counts under its English name too (``ldf_syn``: the
  chapters keep "Prefill" and "KV Cache" in English after glossing them once).
  Its excerpt of each result opens at the query itself (the phrase, else its first word found),
  with the query marked, instead of at the last stemmed word's first occurrence.

``tests/test_browser.py::test_search_ranks_the_books_terms`` types the book's terms in both
editions and checks the chapter that teaches each comes first, with an excerpt holding the query.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from sphinx.search import WordCollector

HERE = Path(__file__).resolve().parent
SCORER = HERE / "ldf_search_scorer.js"
CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]{2,}")
INDEX_PREFIX = "Search.setIndex("


def glossary_pairs(root: Path, language: str) -> list[tuple[str, str]]:
    """(Chinese name, English term) of each glossary term: each term line of
    ``book/glossary.md``'s ``{glossary}`` block, looked up in the edition's ``book/glossary.po``,
    and every run of two or more CJK characters of its translation (``键值缓存（KV cache）`` →
    ``("键值缓存", "KV cache")``).  Empty for English or without a catalog."""
    po = root / "locale" / language / "LC_MESSAGES" / "book" / "glossary.po"
    md = root / "book" / "glossary.md"
    if not po.is_file() or not md.is_file():
        return []
    from babel.messages.pofile import read_po

    text = md.read_text(encoding="utf-8")
    block = text.split("```{glossary}", 1)[-1].split("```", 1)[0]
    terms = [line.strip() for line in block.splitlines() if line.strip() and not line[:1].isspace()]
    with open(po, "rb") as f:
        catalog = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    out: list[tuple[str, str]] = []
    for t in terms:
        for run in CJK_RUN.findall(catalog.get(t, "")):
            if run not in [zh for zh, _ in out]:
                out.append((run, t))
    return out


def glossary_terms(root: Path, language: str) -> list[str]:
    """The Chinese names of the glossary's terms (:func:`glossary_pairs`)."""
    return [zh for zh, _ in glossary_pairs(root, language)]


def _config_inited(app, config) -> None:
    config.html_search_scorer = str(SCORER)
    if (config.language or "en").startswith("zh"):
        words = glossary_terms(Path(app.confdir), config.language)
        if words:
            path = Path(app.doctreedir).parent / "ldf_jieba_terms.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
            options = dict(config.html_search_options or {})
            options.setdefault("dict", str(path))
            config.html_search_options = options
    app.ldf_tf = {}


def _count_words(app, pagename, templatename, context, doctree) -> None:
    """Count the words of page ``pagename`` as Sphinx's indexer stems and filters them."""
    indexer = getattr(app.builder, "indexer", None)
    if doctree is None or indexer is None:
        return
    lang = indexer.lang
    visitor = WordCollector(doctree, lang)
    doctree.walk(visitor)
    counts: Counter = Counter()
    stems: dict[str, str] = {}
    for word in visitor.found_words + visitor.found_title_words:
        s = stems.get(word)
        if s is None:
            s = lang.stem(word).lower()
            if not lang.word_filter(s) and lang.word_filter(word):
                s = word
            stems[word] = s
        if lang.word_filter(s):
            counts[s] += 1
    app.ldf_tf[pagename] = counts


def _write_counts(app, exception) -> None:
    """Add ``ldf_tf`` to the built ``searchindex.js``: each indexed word's count per page (>= 2)."""
    if exception is not None or app.builder.format != "html" or not getattr(app, "ldf_tf", None):
        return
    path = Path(app.outdir) / "searchindex.js"
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    if not (text.startswith(INDEX_PREFIX) and text.endswith(")")):
        return
    index = json.loads(text[len(INDEX_PREFIX):-1])
    docs = {name: i for i, name in enumerate(index["docnames"])}
    words = set(index.get("terms", {})) | set(index.get("titleterms", {}))
    tf: dict[str, list[list[int]]] = {}
    for page, counts in app.ldf_tf.items():
        if page not in docs:
            continue
        for w, c in counts.items():
            if c >= 2 and w in words:
                tf.setdefault(w, []).append([docs[page], c])
    index["ldf_tf"] = {w: sorted(v) for w, v in sorted(tf.items())}
    # a Chinese term and the English one the glossary pairs it with: the scorer ranks a page by
    # either (the Chinese edition keeps "Prefill", "KV Cache" in English in its running text)
    pairs = glossary_pairs(Path(app.confdir), app.config.language or "en")
    if pairs:
        index["ldf_syn"] = {zh: en.lower() for zh, en in pairs}
    path.write_text(INDEX_PREFIX + json.dumps(index, separators=(",", ":"), sort_keys=True) + ")",
                    encoding="utf-8")


def setup(app):
    app.connect("config-inited", _config_inited, priority=460)
    app.connect("html-page-context", _count_words)
    app.connect("build-finished", _write_counts)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": False}
