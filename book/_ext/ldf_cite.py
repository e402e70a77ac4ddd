"""Author-year citations that tell apart works with the same author and year.

With sphinxcontrib-bibtex's ``author_year`` style, twelve NVIDIA documents of 2025 all read
"[NVIDIA, 2025]" (likewise two vLLM pages, two DeepSeek reports, two Touvron et al. papers).
The ``ldf_author_year`` reference style (``bibtex_reference_style`` in ``_config.yml``) adds a
short title exactly where author and year alone are ambiguous:

    [NVIDIA, *CUDA C++ Programming Guide*, 2025]   [Touvron et al., *Llama 2*, 2023]
    [Kwon et al., 2023]                            (unambiguous: unchanged)

The short title is the entry's ``shorttitle`` field when it has one (the biblatex field), else
its title up to the first colon, without a parenthetical remark or a leading author name, cut to
five words (the whole title, up to ten words, where two works share that first part).  The hover text of every citation still gives the full reference.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from pybtex.richtext import Tag, Text
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle, BasicAuthorYearTextualReferenceStyle)
from sphinxcontrib.bibtex.style.template import join, join2, node, post_text, pre_text, reference, year

STYLE = "ldf_author_year"
MAX_WORDS = 5
SHORT_TITLES: dict[str, str] = {}   # bib key -> short title, only for ambiguous author-year pairs


def _plain(s: str) -> str:
    """BibTeX text as a reader sees it: no braces, no escapes (\\_ → _), single spaces."""
    s = re.sub(r"\\([_&%#$])", r"\1", s.replace("{", "").replace("}", ""))
    return re.sub(r"\s+", " ", s).strip()


def _author_key(entry) -> tuple:
    """What the author part of an author-year citation shows: first last name, and the
    second one for two authors ("A and B") or "et al." for more."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    if not people:
        return ("", "")
    first = _plain(" ".join(people[0].last_names))
    if len(people) == 2:
        return (first, _plain(" ".join(people[1].last_names)))
    return (first, "et al." if len(people) > 2 else "")


def short_title(entry, *, whole: bool = False) -> str:
    """The entry's ``shorttitle``, or its title shortened as the module docstring says
    (``whole``: keep the part after a colon too, for titles that share their first part)."""
    if entry.fields.get("shorttitle"):
        return _plain(entry.fields["shorttitle"])
    title = _plain(entry.fields.get("title", ""))
    if not whole:
        title = title.split(":")[0]
    title = re.sub(r"\s*\([^)]*\)", "", title).strip()
    author = _author_key(entry)[0]
    if author and title.lower().startswith(author.lower() + " "):
        title = title[len(author) + 1:]
    words = title.split()
    limit = MAX_WORDS * 2 if whole else MAX_WORDS
    return " ".join(words[:limit]) + ("…" if len(words) > limit else "")


def ambiguous_short_titles(bibfiles) -> dict[str, str]:
    """{key: short title} for every entry whose (author part, year) another entry shares."""
    from pybtex.database import parse_file

    groups = defaultdict(list)
    for path in bibfiles:
        for key, entry in parse_file(str(path)).entries.items():
            groups[(_author_key(entry), entry.fields.get("year", ""))].append((key, entry))
    out = {}
    for members in groups.values():
        if len(members) > 1:
            short = {key: short_title(entry) for key, entry in members}
            counts = defaultdict(int)
            for title in short.values():
                counts[title] += 1
            out.update({key: short_title(entry, whole=True) if counts[short[key]] > 1 else short[key]
                        for key, entry in members})
    return out


@node
def ambiguity_title(children, data):
    """The short title in italics where author-year is ambiguous, else nothing."""
    assert not children
    s = SHORT_TITLES.get(data["entry"].key)
    return Text(Tag("em", s)) if s else Text()


@dataclass
class _Parenthetical(BasicAuthorYearParentheticalReferenceStyle):
    def inner(self, role_name):
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text,
            reference[join(sep=self.author_year_sep)[
                self.person.author_or_editor_or_title(full="s" in role_name), ambiguity_title, year]],
            post_text,
        ]


@dataclass
class _Textual(BasicAuthorYearTextualReferenceStyle):
    def inner(self, role_name):
        return join(sep=self.text_reference_sep)[
            self.person.author_or_editor_or_title(full="s" in role_name),
            join[self.bracket.left,
                 join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
                     pre_text, reference[join(sep=", ")[ambiguity_title, year]], post_text],
                 self.bracket.right],
        ]


@dataclass
class LdfAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    def __post_init__(self):
        super().__post_init__()
        for i, s in enumerate(self.styles):   # swap in the two author-year styles above
            if type(s) is BasicAuthorYearParentheticalReferenceStyle:
                self.styles[i] = _Parenthetical(bracket=s.bracket, person=s.person,
                                                author_year_sep=s.author_year_sep,
                                                pre_text_sep=s.pre_text_sep, post_text_sep=s.post_text_sep)
            elif type(s) is BasicAuthorYearTextualReferenceStyle:
                self.styles[i] = _Textual(bracket=s.bracket, person=s.person,
                                          text_reference_sep=s.text_reference_sep,
                                          pre_text_sep=s.pre_text_sep, post_text_sep=s.post_text_sep)
        self.role_style.update((r, st) for st in self.styles for r in st.role_names())


def _builder_inited(app) -> None:
    files = [Path(app.confdir) / f for f in (app.config.bibtex_bibfiles or [])]
    SHORT_TITLES.clear()
    SHORT_TITLES.update(ambiguous_short_titles(files))


def setup(app):
    register_plugin("sphinxcontrib.bibtex.style.referencing", STYLE, LdfAuthorYearReferenceStyle, force=True)
    app.connect("builder-inited", _builder_inited, priority=400)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
