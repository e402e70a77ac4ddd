"""Local Sphinx extension of the book: serve the browser libraries from the site itself.

``tools/build_book.sh`` installs the pinned npm packages of ``web/package-lock.json`` and copies the
files the pages need to ``web/dist/_vendor/``.  When they are there, this extension

* adds ``web/dist`` to ``html_extra_path`` (so the site root gets ``_vendor/``; it is deliberately
  not under ``_static/``, whose js/css Jupyter Book injects into every page),
* points myst-nb's ``nb_ipywidgets_js`` (require.js + ``embed-amd.js``) and Sphinx's
  ``mathjax_path`` (MathJax 3, SVG output: no web fonts to fetch, works from ``file://``) at them.
  Paths given to Sphinx's ``add_js_file`` are relative to ``_static/``, hence ``../_vendor/``.

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

VENDOR_FILES = ("require.js", "require-config.js", "html-manager/embed-amd.js", "mathjax/tex-svg.js",
                "vega/vega.min.js", "vega-lite/vega-lite.min.js", "vega-embed/vega-embed.min.js")
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
    if local_assets_available(root):
        config.html_extra_path = list(config.html_extra_path) + [EXTRA_DIR]
        config.nb_ipywidgets_js = {
            "../_vendor/require.js": {},
            "../_vendor/require-config.js": {},   # embed-amd's fonts: see web/require-config.js
            "../_vendor/html-manager/embed-amd.js": {},
        }
        config.mathjax_path = "../_vendor/mathjax/tex-svg.js"
        app.ldf_offline = True
        logger.info("ldf_book: serving require.js, ipywidgets, MathJax and Vega from _vendor/")
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


def _page_context(app, pagename, templatename, context, doctree) -> None:
    """Start pages in the "auto" light/dark mode; drop sphinx-thebe's scripts when thebe is off.

    pydata-sphinx-theme logs a console error ("Got invalid theme mode") on a first visit when
    its ``default_mode`` is empty, as sphinx-book-theme leaves it; "auto" follows the reader's
    OS setting, and the theme remembers the reader's own choice.

    Jupyter Book always loads the sphinx_thebe extension; with Sphinx 7 its inline
    ``const THEBE_JS_URL = ...`` is added twice (a page error), and it names a CDN.  The book's
    calculators need no kernel, so without ``launch_buttons.thebe`` the scripts are removed.
    """
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    if (app.config.html_theme_options or {}).get("launch_buttons", {}).get("thebe"):
        return
    if "script_files" in context:
        context["script_files"] = [js for js in context["script_files"] if not _is_thebe(js)]


def setup(app):
    app.connect("config-inited", _config_inited, priority=400)
    app.connect("html-page-context", _page_context, priority=900)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
