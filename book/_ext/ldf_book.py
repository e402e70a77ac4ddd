"""Local Sphinx extension of the book: serve the browser libraries from the site itself.

``tools/build_book.sh`` installs the pinned npm packages of ``web/package-lock.json`` and copies the
files the pages need to ``web/dist/_vendor/``.  When they are there, this extension

* adds ``web/dist`` to ``html_extra_path`` (so the site root gets ``_vendor/``; it is deliberately
  not under ``_static/``, whose js/css Jupyter Book injects into every page),
* points myst-nb's ``nb_ipywidgets_js`` (require.js + ``embed-amd.js``) at them.  Paths given to
  Sphinx's ``add_js_file`` are relative to ``_static/``, hence ``../_vendor/``.

Math is rendered to SVG at build time by ``ldf_math`` (no MathJax on any page); citations use the
``ldf_author_year`` style of ``ldf_cite``.  This module also keeps each page as light as it can
be (``_page_context``) and fixes two theme defects (``_config_inited``).

The calculators of ``llm_dataflow.live`` find Vega, Vega-Lite and vega-embed at
``<content root>/_vendor/`` by themselves.  Without the files (no npm) the pages keep the CDN URLs
(myst-nb's and Sphinx's defaults, and ``window.LDF_VEGA`` below for the calculators) and the
build prints one warning line (not a Sphinx warning, so ``-W`` still passes).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

import ldf_cite
import ldf_math

VENDOR_FILES = ("require.js", "require-config.js", "html-manager/embed-amd.js",
                "vega/vega.min.js", "vega-lite/vega-lite.min.js", "vega-embed/vega-embed.min.js")
WIDGET_SCRIPTS = ("_vendor/require.js", "_vendor/require-config.js", "_vendor/html-manager/embed-amd.js",
                  "require.min.js", "embed-amd.js")   # local names and myst-nb's CDN defaults
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
STATIC = Path(__file__).parent / "static"      # ldf.css, ldf.js: on every page
TEMPLATES = Path(__file__).parent / "templates"
EXTRA_DIR = "web/dist"  # relative to the book root (the folder holding _config.yml)


def _pinned_versions(root: Path) -> dict:
    try:
        return json.loads((root / "web" / "package.json").read_text())["dependencies"]
    except (OSError, KeyError, ValueError):
        return {"vega": "6", "vega-lite": "6", "vega-embed": "7"}


def local_assets_available(root: Path) -> bool:
    """True when every file of VENDOR_FILES exists under ``root/web/dist/_vendor``."""
    vendor = root / EXTRA_DIR / "_vendor"
    return all((vendor / f).is_file() for f in VENDOR_FILES)


def _config_inited(app, config) -> None:
    root = Path(app.confdir)
    theme = dict(config.html_theme_options or {})
    # pydata-sphinx-theme 0.17 (the version sphinx-book-theme 1.3.0 pins exactly) fills an empty
    # navbar_persistent with its search field, which makes it render its own header bar on top
    # of sphinx-book-theme's: a second search box (three on search.html) and a second
    # `.primary-toggle` button.  Its script wires only the first `.primary-toggle` in the page
    # (that hidden header's), so the visible "toggle primary sidebar" of sphinx-book-theme opened
    # nothing on phones (pydata/pydata-sphinx-theme#2451, executablebooks/sphinx-book-theme#988).
    # An explicit empty list keeps that header out: one search box, one `.primary-toggle`, and the
    # phone drawer opens (tests/test_browser.py::test_phone_navigation checks it at 390 px).
    theme.setdefault("navbar_persistent", [])
    config.html_theme_options = theme
    config.html_static_path = list(config.html_static_path) + [str(STATIC)]
    # templates/webpack-macros.html: the theme's head macros without the 1.5 MB Font Awesome
    # script (the theme's stylesheet already draws every icon with Font Awesome's web fonts).
    config.templates_path = [str(TEMPLATES)] + list(config.templates_path)
    if local_assets_available(root):
        config.html_extra_path = list(config.html_extra_path) + [EXTRA_DIR]
        config.nb_ipywidgets_js = {
            "../_vendor/require.js": {},
            "../_vendor/require-config.js": {},   # embed-amd's fonts: see web/require-config.js
            "../_vendor/html-manager/embed-amd.js": {},
        }
        app.ldf_offline = True
        logger.info("ldf_book: serving require.js, ipywidgets and Vega from _vendor/")
        if not ldf_math.available(root) and not os.environ.get("LDF_ASSETS_WARNED"):
            print("WARNING: Node.js or web/node_modules/mathjax not found (run tools/build_book.sh "
                  "with npm) - pages with math load MathJax from a CDN.", flush=True)
        return
    app.ldf_offline = False
    v = _pinned_versions(root)
    cdn = {name: f"https://cdn.jsdelivr.net/npm/{name}@{v.get(name, '')}/build/{name}.min"
           for name in ("vega", "vega-lite", "vega-embed")}
    app.add_js_file(None, body=f"window.LDF_VEGA = {json.dumps(cdn, sort_keys=True)};")
    if not os.environ.get("LDF_ASSETS_WARNED"):
        # print, not logger.warning: -W must not fail a build on a machine without npm.
        print("WARNING: web/dist/_vendor/ not found (run tools/build_book.sh with npm) - the pages "
              "load require.js, ipywidgets, MathJax and Vega from CDNs and will need the internet.",
              flush=True)


def _is_thebe(js) -> bool:
    name = str(getattr(js, "filename", js) or "")
    body = str((getattr(js, "attributes", None) or {}).get("body", ""))
    return name.endswith("sphinx-thebe.js") or "THEBE_JS_URL" in body


def _is_widget_script(js) -> bool:
    name = str(getattr(js, "filename", js) or "").split("?")[0]
    attrs = getattr(js, "attributes", None) or {}
    return attrs.get("type") == WIDGET_STATE or any(name.endswith(w) for w in WIDGET_SCRIPTS)


def _is_mathjax(app, js) -> bool:
    name = str(getattr(js, "filename", js) or "").split("?")[0]
    body = str((getattr(js, "attributes", None) or {}).get("body", ""))
    path = str(app.config.mathjax_path or "").split("?")[0]
    return bool(path) and name.endswith(path.split("/")[-1]) or body.startswith("window.MathJax =")


def _page_context(app, pagename, templatename, context, doctree) -> None:
    """Start pages in the "auto" light/dark mode; load each heavy library only where it is used;
    drop sphinx-thebe's scripts when thebe is off.

    myst-nb adds the ipywidgets manager (require.js + ``embed-amd.js``, 3.7 MB) to every notebook
    page whose notebook stores widget state, although a calculator shows its static Vega view
    (``nb_mime_priority_overrides``) and only a page that renders a widget view needs the manager.
    Likewise myst-nb makes Sphinx load MathJax on every page; when ``ldf_math`` could not render
    the math at build time, MathJax stays only on pages that have math.

    pydata-sphinx-theme logs a console error ("Got invalid theme mode") on a first visit when
    its ``default_mode`` is empty, as sphinx-book-theme leaves it; "auto" follows the reader's
    OS setting, and the theme remembers the reader's own choice.

    Jupyter Book always loads the sphinx_thebe extension; with Sphinx 7 its inline
    ``const THEBE_JS_URL = ...`` is added twice (a page error), and it names a CDN.  The book's
    calculators need no kernel, so without ``launch_buttons.thebe`` the scripts are removed.
    """
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    if "script_files" not in context:
        return
    scripts = list(context["script_files"])
    body = context.get("body", "")
    if WIDGET_VIEW not in body:
        scripts = [js for js in scripts if not _is_widget_script(js)]
    domain = app.env.get_domain("math")
    if not domain.has_equations(pagename):
        scripts = [js for js in scripts if not _is_mathjax(app, js)]
    if not (app.config.html_theme_options or {}).get("launch_buttons", {}).get("thebe"):
        scripts = [js for js in scripts if not _is_thebe(js)]
    context["script_files"] = scripts


def _favicon_ico(app, exception) -> None:
    """Write ``favicon.ico`` at the site root: browsers ask for it on pages without an icon
    link (Jupyter Book's redirecting ``index.html``).  The same three bars as book/favicon.svg,
    drawn with Pillow (a matplotlib dependency)."""
    if exception is not None or app.builder.format != "html":
        return
    from PIL import Image, ImageDraw

    img = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    d.rounded_rectangle((0, 0, 31, 31), radius=6, fill="#1f4e79")
    for (x0, y0, x1, y1), color in (((5, 6, 26, 10), "#9cc3e6"), ((8, 14, 23, 18), "#c9def2"),
                                    ((11, 22, 20, 26), "#ffffff")):
        d.rounded_rectangle((x0, y0, x1, y1), radius=1, fill=color)
    img.save(Path(app.outdir) / "favicon.ico", sizes=[(16, 16), (32, 32)])


def setup(app):
    app.setup_extension("ldf_math")
    app.setup_extension("ldf_cite")
    app.setup_extension("ldf_i18n")
    app.setup_extension("ldf_planner")   # the web planner page (book/planner.md)
    app.setup_extension("ldf_search")    # search ranked by title, headings and term frequency
    app.add_css_file("ldf.css")
    app.add_js_file("ldf.js")
    app.connect("config-inited", _config_inited, priority=400)
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("build-finished", _favicon_ico)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": False}
