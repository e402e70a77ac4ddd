"""The book's two editions: English (the sources) and 简体中文 (gettext catalogs of the same text).

Sphinx translates every paragraph, heading, list item and table cell through
``locale/<language>/LC_MESSAGES/<docname>.po`` (``language`` and ``locale_dirs`` in
``_config.yml``; ``tools/build_book.sh`` builds the Chinese edition into ``_build/html/zh_CN/``).
This extension adds what Sphinx's i18n does not cover here:

* **Figure alt texts and calculator labels.** myst-nb keeps a notebook's outputs as mime bundles
  that it narrows per builder after reading, so the gettext builder never sees an output's image
  (its alt text comes from the cell's ``mystnb.image.alt``) nor a calculator's HTML.  For the
  gettext builder a post-transform that runs before myst-nb's adds both to the page's catalog:
  each alt text, and each label of a calculator card (:func:`llm_dataflow.live.card_messages`).
  In a translated build, Sphinx's own Locale transform translates the alt texts (it handles
  images with alt text), and :class:`TranslateCards` rewrites each calculator card with
  :func:`llm_dataflow.live.translate_card` (and translates the sidebar's part captions).  Printed outputs, code and figure axes stay English.
* **A language switch on every page** (``templates/ldf-language.html``, in the article header
  beside the theme's buttons, so it shows at phone width too) linking to the same page in the
  other edition by a relative URL, which works offline and from ``file://``; plus
  ``<link rel="alternate" hreflang>`` for search engines.
* The tag ``lang_<language>`` (``lang_zh_CN``): an ``{only} lang_zh_CN`` block shows in that
  edition only (the gettext builder sets it too, so the block's text is extracted for translation).
"""
from __future__ import annotations

import html as _html
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.builders.gettext import MsgOrigin
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.i18n import docname_to_domain

# The editions, in the order the switch lists them: (language code, its name in itself, the
# folder the edition lives in under the English site's root).
EDITIONS = (("en", "English", ""), ("zh_CN", "简体中文", "zh_CN/"))
SHORT_NAMES = {"en": "EN", "zh_CN": "中文"}    # the switch's label at phone width
TRANSLATIONS = tuple(code for code, _, _ in EDITIONS if code != "en")
TEMPLATES = Path(__file__).parent / "templates"


def edition(language: str | None) -> str:
    """The edition code of a Sphinx ``language`` (None and "en" are the English edition)."""
    return "en" if language in (None, "", "en") else language


def other_edition_url(pagename: str, language: str | None, target: str) -> str:
    """Relative URL of page ``pagename`` in edition ``target``, from the same page in edition
    ``language`` (English pages live at the site root, translations under ``<code>/``).

    >>> other_edition_url("notebooks/00_overview", "en", "zh_CN")
    '../zh_CN/notebooks/00_overview.html'
    >>> other_edition_url("notebooks/00_overview", "zh_CN", "en")
    '../../notebooks/00_overview.html'
    """
    folders = {code: folder for code, _, folder in EDITIONS}
    src, dst = edition(language), edition(target)
    if src not in folders or dst not in folders:
        raise ValueError(f"language {language!r} / {target!r}: the editions are {sorted(folders)}")
    up = "../" * (pagename.count("/") + folders[src].count("/"))
    return f"{up}{folders[dst]}{pagename}.html"


def _builder_inited(app) -> None:
    lang = edition(app.config.language)
    if lang != "en":
        app.tags.add(f"lang_{lang}")
    if app.builder.name == "gettext":
        for code in TRANSLATIONS:
            app.tags.add(f"lang_{code}")


def _config_inited(app, config) -> None:
    theme = dict(config.html_theme_options or {})
    end = theme.get("article_header_end", ["article-header-buttons.html"])
    end = [end] if isinstance(end, str) else list(end)
    if "ldf-language.html" not in end:
        theme["article_header_end"] = ["ldf-language.html"] + end
    config.html_theme_options = theme
    if str(TEMPLATES) not in [str(t) for t in config.templates_path]:
        config.templates_path = [str(TEMPLATES)] + list(config.templates_path)


def _page_context(app, pagename, templatename, context, doctree) -> None:
    lang = edition(app.config.language)
    links = []
    for code, name, _ in EDITIONS:
        if code != lang:
            links.append({"code": code, "hreflang": code.replace("_", "-"), "name": name,
                          "short": SHORT_NAMES[code],
                          "url": other_edition_url(pagename, lang, code)})
    context["ldf_editions"] = links
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<link rel="alternate" hreflang="{e["hreflang"]}" href="{_html.escape(e["url"])}" />'
        for e in links)


# The themes' own zh_CN strings that are Traditional wording; the Simplified the book uses.
THEME_WORDING = {"zh_CN": {"列印成 PDF": "打印为 PDF"}}


def _theme_wording(app, pagename, templatename, context, doctree) -> None:
    """Replace the theme's Traditional wording in the header buttons' tooltips and labels."""
    fixes = THEME_WORDING.get(edition(app.config.language), {})

    def fix(buttons):
        for b in buttons or []:
            for key in ("tooltip", "label", "text"):
                if isinstance(b.get(key), str) and b[key] in fixes:
                    b[key] = fixes[b[key]]
            fix(b.get("buttons"))

    if fixes:
        fix(context.get("header_buttons"))


def _is_calculator(node) -> bool:
    return isinstance(node, nodes.raw) and "ldf-calc-card" in node.astext()


class ExtractOutputMessages(SphinxPostTransform):
    """gettext builder only: add output alt texts and calculator labels to the page's catalog
    (before myst-nb's ``SelectMimeType``, priority 4, drops the mime bundles it does not pick)."""

    default_priority = 3
    builders = ("gettext",)

    def run(self, **kwargs) -> None:
        from llm_dataflow.live import card_messages

        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        catalog = self.app.builder.catalogs[domain]
        source = self.env.doc2path(self.env.docname)
        for node in self.document.findall(lambda n: isinstance(n, nodes.image) or _is_calculator(n)):
            line = node.line or 0
            if isinstance(node, nodes.image):
                if node.get("alt"):
                    catalog.add(node["alt"], MsgOrigin(source, line))
            else:
                for msg in card_messages(node.astext()):
                    catalog.add(msg, MsgOrigin(source, line))


class TranslateCards(SphinxTransform):
    """Translated editions: rewrite each calculator card's labels, and the captions of the
    toctrees sphinx-external-toc inserts (its transform runs at 100, after Sphinx's Locale
    transform at 20, so they would stay English), through the page's catalog."""

    default_priority = 110

    def apply(self, **kwargs) -> None:
        if edition(self.config.language) == "en" or self.app.builder.name == "gettext":
            return
        from llm_dataflow.live import translate_card

        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        dirs = [str(Path(self.env.srcdir) / d) for d in self.config.locale_dirs]
        catalog, has = init_locale(dirs, self.config.language, domain)
        if not has:
            return
        for node in list(self.document.findall(_is_calculator)):
            new = translate_card(node.astext(), catalog.gettext)
            node.replace_self(nodes.raw(node.rawsource, new, format=node.get("format", "html")))
        for toc in self.document.findall(addnodes.toctree):
            if toc.get("caption"):
                toc["caption"] = toc["rawcaption"] = catalog.gettext(toc["caption"])


def setup(app):
    app.connect("config-inited", _config_inited, priority=450)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _page_context)
    app.connect("html-page-context", _theme_wording, priority=900)   # after the theme's buttons (501)
    app.add_post_transform(ExtractOutputMessages)
    app.add_transform(TranslateCards)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
