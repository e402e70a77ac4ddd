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
* **The themes' own words** in the edition's language: header tooltips and the search box's
  placeholder (``_theme_wording``, ``_search_box_wording``; ``templates/toggle-*-sidebar.html``
  put the sidebar buttons' tooltips through ``_()``), all from ``locale/<language>/LC_MESSAGES/
  sphinx.po``, which Sphinx compiles and reads before its own catalog.
* **The download button gives the page in its edition's language**: at the end of a translated
  build each page's ``_sources/`` copy (the notebook or the markdown the button downloads) is
  translated through the page's catalog (``translate_markdown``, ``translated_notebook``).
* **Colab, Binder and JupyterHub open the edition's notebook**: they open a notebook by its path
  in the repository, so ``tools/zh_notebooks.py`` commits each chapter's translated notebook
  (the download's text, its links moved one folder down) to ``notebooks/<language>/``, and
  ``_launch_links`` points the buttons there (their tooltips in ``sphinx.po`` say so).
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
    """The header buttons' tooltips and labels in the edition's language: the themes' Traditional
    wording replaced, and the strings the themes leave in English (sphinx-book-theme's "Launch on
    Colab", "Launch interactive content") read through the book's own ``sphinx.po``
    (``locale/<language>/LC_MESSAGES/``, which Sphinx merges into its translator)."""
    lang = edition(app.config.language)
    if lang == "en":
        return
    fixes = THEME_WORDING.get(lang, {})
    gettext = app.translator.gettext

    def fix(buttons):
        for b in buttons or []:
            for key in ("tooltip", "label", "text"):
                if isinstance(b.get(key), str) and b[key].strip():   # gettext("") is the catalog's header
                    b[key] = fixes.get(b[key], gettext(b[key]))
            fix(b.get("buttons"))

    fix(context.get("header_buttons"))


def translated_notebook_path(path: str, language: str) -> str:
    """Where the repository keeps the edition ``language``'s copy of the notebook ``path``
    (relative to the repository root, ``/`` separated): a ``<language>/`` folder beside it.
    ``tools/zh_notebooks.py`` writes the files; the edition's launch buttons open them.

    >>> translated_notebook_path("notebooks/00_overview.ipynb", "zh_CN")
    'notebooks/zh_CN/00_overview.ipynb'
    """
    if edition(language) not in TRANSLATIONS:
        raise ValueError(f"language {language!r}: the translated editions are {list(TRANSLATIONS)}")
    folder, _, name = path.rpartition("/")
    return f"{folder}/{language}/{name}" if folder else f"{language}/{name}"


def _launch_links(app, pagename, templatename, context, doctree) -> None:
    """Translated editions: the Colab, Binder and JupyterHub buttons (sphinx-book-theme's
    ``add_launch_buttons``, ``header_buttons/launch.py``, which puts the notebook's repository
    path ``<path_to_docs><pagename>.ipynb`` into each URL) open the edition's notebook,
    :func:`translated_notebook_path`.  A chapter whose translated notebook is not in the source
    tree keeps the English links and warns (the book builds with ``-W``, so the build fails)."""
    lang = edition(app.config.language)
    group = next((b for b in context.get("header_buttons") or []
                  if b.get("label") == "launch-buttons"), None)
    if lang == "en" or group is None:
        return
    from sphinx.util import logging

    suffix = Path(app.env.doc2path(pagename)).suffix
    book = (app.config.html_theme_options.get("path_to_docs") or "").strip("/")
    english = f"{book}/{pagename}{suffix}" if book else f"{pagename}{suffix}"
    local = translated_notebook_path(f"{pagename}{suffix}", lang)
    if not (Path(app.srcdir) / local).is_file():
        logging.getLogger(__name__).warning(
            f"{local} does not exist: the launch buttons of {pagename} open the English notebook "
            "(write it with `python tools/zh_notebooks.py`)")
        return
    translated = translated_notebook_path(english, lang)
    for b in group.get("buttons") or []:
        if b.get("type") == "link" and english in b.get("url", ""):
            if b["url"].count(english) != 1:
                raise ValueError(f"launch URL {b['url']!r} names {english!r} more than once")
            b["url"] = b["url"].replace(english, translated)


def _search_box_wording(app, config) -> None:
    """The search box's placeholder (Jupyter Book's literal "Search this book...") in the edition's
    language, through the same catalog."""
    if edition(config.language) == "en":
        return
    theme = dict(config.html_theme_options or {})
    text = theme.get("search_bar_text")
    if isinstance(text, str) and text.strip():
        theme["search_bar_text"] = app.translator.gettext(text)
        config.html_theme_options = theme


# Directives whose body is prose (translated like the text around them) when a source is
# translated for download; any other fence (code, math, a glossary) is kept as written.
PROSE_FENCES = ("dropdown", "note", "tip", "warning", "important", "admonition", "margin", "seealso")


def _markdown_parser():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.colon_fence import colon_fence_plugin
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    return MarkdownIt("commonmark").enable("table").use(colon_fence_plugin).use(dollarmath_plugin)


def translate_markdown(text: str, gettext, _md=None) -> str:
    """``text`` (MyST markdown) with each paragraph, heading, list item and table cell replaced
    by its translation, looked up as Sphinx extracts it (the source with its line breaks as
    spaces: the catalogs' ``msgid``); a block without a translation, code, math and any fence
    that is not prose (:data:`PROSE_FENCES`) stay as written.  A translated block is one line,
    after the original's list marker, indentation or ``#`` marks.

    (``tests/test_site.py::test_a_translated_source_reads_in_its_language`` checks it.)
    """
    md = _md or _markdown_parser()
    lines = text.split("\n")
    tokens = md.parse(text)
    out: dict[int, str | None] = {}

    def tr(msgid: str) -> str:
        got = gettext(msgid) if msgid.strip() else None
        return got if isinstance(got, str) and got else msgid

    for i, tok in enumerate(tokens):
        prev = tokens[i - 1].type if i else ""
        if tok.type == "inline" and tok.map and prev in ("paragraph_open", "heading_open"):
            msgid = tok.content.replace("\n", " ").strip()
            new = tr(msgid)
            a, b = tok.map
            head = tok.content.split("\n")[0]
            k = lines[a].find(head) if head else -1
            if new == msgid or k < 0 or a in out:
                continue
            out[a] = lines[a][:k] + new
            for j in range(a + 1, b):
                out[j] = None
        elif tok.type == "inline" and prev in ("th_open", "td_open") and tok.content.strip():
            row = next((t.map for t in reversed(tokens[:i]) if t.type == "tr_open" and t.map), None)
            new = tr(tok.content.strip())
            if row and new != tok.content.strip():
                a = row[0]
                out[a] = (out.get(a) or lines[a]).replace(tok.content.strip(), new, 1)
        elif tok.type == "colon_fence" and tok.map and tok.info.strip("{} ").split("}")[0] in PROSE_FENCES:
            a, b = tok.map
            name, _, title = tok.info.partition("}")
            if title.strip():
                out[a] = lines[a].replace(title.strip(), tr(title.strip()), 1)
            body = translate_markdown(tok.content.rstrip("\n"), gettext, md)
            inner = list(range(a + 1, b - 1))
            if inner:
                out[inner[0]] = body
                for j in inner[1:]:
                    out[j] = None
    return "\n".join(out.get(j, line) for j, line in enumerate(lines) if out.get(j, line) is not None)


def translated_notebook(nb: dict, gettext) -> dict:
    """A copy of the notebook ``nb`` (nbformat JSON) for a translated edition: its markdown cells
    through :func:`translate_markdown`, each figure's alt text (``mystnb.image.alt``) and each
    calculator's labels (:func:`llm_dataflow.live.translate_card`) through ``gettext``; code
    and every other output unchanged."""
    import copy

    from llm_dataflow.live import translate_card

    out, md = copy.deepcopy(nb), _markdown_parser()
    for cell in out.get("cells", []):
        if cell.get("cell_type") == "markdown":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = translate_markdown(src, gettext, md).splitlines(keepends=True)
        image = cell.get("metadata", {}).get("mystnb", {}).get("image", {})
        if isinstance(image.get("alt"), str) and image["alt"]:
            image["alt"] = gettext(image["alt"]) or image["alt"]
        for o in cell.get("outputs", []):
            html = o.get("data", {}).get("text/html")
            if html is not None and "ldf-calc-card" in "".join(html):
                o["data"]["text/html"] = translate_card("".join(html), gettext).splitlines(keepends=True)
    return out


def notebook_text(nb: dict) -> str:
    """The file text of a translated notebook (the zh download, ``notebooks/zh_CN/``): JSON with
    one-space indents and the characters as they are, as nbformat writes the English ones."""
    import json

    return json.dumps(nb, ensure_ascii=False, indent=1) + "\n"


def _translated_sources(app, exception) -> None:
    """Translated editions: the page's downloadable source (``_sources/<page>.ipynb`` or ``.md``,
    what the download button gives) in the edition's language, so a reader of the Chinese page
    downloads the Chinese notebook."""
    lang = edition(app.config.language)
    if exception is not None or lang == "en" or app.builder.format != "html":
        return
    import json

    dirs = [str(Path(app.srcdir) / d) for d in app.config.locale_dirs]
    for docname in sorted(app.env.found_docs):
        src = Path(app.env.doc2path(docname))
        target = Path(app.outdir) / "_sources" / (docname + src.suffix)
        if src.suffix not in (".ipynb", ".md") or not target.is_file():
            continue
        catalog, has = init_locale(dirs, app.config.language, docname_to_domain(docname, app.config.gettext_compact))
        if not has:
            continue
        if src.suffix == ".ipynb":
            nb = json.loads(src.read_text(encoding="utf-8"))
            target.write_text(notebook_text(translated_notebook(nb, catalog.gettext)), encoding="utf-8")
        else:
            target.write_text(translate_markdown(src.read_text(encoding="utf-8"), catalog.gettext), encoding="utf-8")


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
    app.connect("config-inited", _search_box_wording, priority=900)
    app.connect("builder-inited", _builder_inited)
    app.connect("html-page-context", _page_context)
    app.connect("html-page-context", _theme_wording, priority=900)   # after the theme's buttons (501)
    app.connect("html-page-context", _launch_links, priority=900)
    app.connect("build-finished", _translated_sources)
    app.add_post_transform(ExtractOutputMessages)
    app.add_transform(TranslateCards)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
