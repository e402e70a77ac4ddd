"""Math rendered to SVG at build time: the pages load no MathJax.

Sphinx's default ``mathjax`` renderer writes TeX into the page and loads MathJax 3 (``tex-svg.js``,
2.1 MB, plus the components it fetches) on every page of a Jupyter Book, because myst-nb sets the
assets policy to "always".  This renderer (``html_math_renderer = "ldf_svg"``) instead sends each
formula to one Node.js process running the pinned MathJax of ``web/node_modules``
(``web/mathjax-render.js``) and writes the SVG it returns into the page:

* math shows at once, with no script, also from ``file://`` and with JavaScript off;
* glyph outlines are stored once per page in a hidden ``<svg>`` (MathJax's "global" font cache)
  that each formula references, so a formula adds ~1-3 kB of HTML;
* a TeX error is a Sphinx warning (the ``-W`` build fails) instead of red text on a page;
* each formula keeps its TeX as ``aria-label`` (screen readers read the source).

Display math follows ``sphinx.ext.mathjax.html_visit_displaymath`` (equation numbers and
permalinks, ``nowrap``, blank-line separated equations aligned, ``\\\\`` wrapped in ``split``).

Without ``node`` or ``web/node_modules/mathjax`` (no npm), Sphinx's MathJax renderer stays on and
``ldf_book`` loads MathJax only on pages that contain math.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

from docutils import nodes
from sphinx.locale import _
from sphinx.util import logging
from sphinx.util.math import get_node_equation_number

logger = logging.getLogger(__name__)

RENDERER = "ldf_svg"
SCRIPT = "web/mathjax-render.js"                       # relative to the book root
MATHJAX = "web/node_modules/mathjax/es5/node-main.js"  # what the script needs


class NodeMathJax:
    """One ``node web/mathjax-render.js`` process, asked one JSON line at a time."""

    def __init__(self, root: Path):
        self.proc = subprocess.Popen([shutil.which("node") or "node", str(root / SCRIPT)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8", bufsize=1)
        self.lock = threading.Lock()
        self.page: str | None = None   # the docname whose formulas the font cache holds
        self.css: str | None = None

    def ask(self, **req) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{SCRIPT} exited (status {self.proc.poll()}) while rendering math")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def available(root: Path) -> bool:
    """True when Node.js and the pinned MathJax (``npm ci`` in web/) are both present."""
    return shutil.which("node") is not None and (root / MATHJAX).is_file() and (root / SCRIPT).is_file()


def _jax(self) -> NodeMathJax:
    app = self.builder.app
    if getattr(app, "ldf_mathjax", None) is None:
        app.ldf_mathjax = NodeMathJax(Path(app.confdir))
    return app.ldf_mathjax


def _svg(self, node, tex: str, display: bool) -> str:
    jax = _jax(self)
    docname = self.builder.current_docname
    if jax.page != docname:          # pages are written one at a time (parallel_write_safe False)
        jax.ask(op="page")
        jax.page = docname
    out = jax.ask(op="tex", tex=tex, display=display)
    if out.get("error"):
        logger.warning("TeX error %r in %s", out["error"], tex, location=node, type="ldf", subtype="math")
    label = html.escape(" ".join(tex.split()), quote=True)
    # The container is the image a screen reader announces (its TeX source); the SVG inside is
    # decoration for it.
    return (out["html"]
            .replace('role="img" focusable="false"', 'aria-hidden="true" focusable="false"', 1)
            .replace('<mjx-container class="MathJax" jax="SVG"',
                     f'<mjx-container class="MathJax" jax="SVG" role="img" aria-label="{label}"', 1))


def visit_math(self, node: nodes.math) -> None:
    self.body.append(self.starttag(node, "span", "", CLASS="math notranslate nohighlight"))
    self.body.append(_svg(self, node, node.astext(), display=False) + "</span>")
    raise nodes.SkipNode


def visit_displaymath(self, node: nodes.math_block) -> None:
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node["nowrap"]:
        self.body.append(_svg(self, node, node.astext(), display=True) + "</div>\n")
        raise nodes.SkipNode
    if node["number"]:
        number = get_node_equation_number(self, node)
        self.body.append('<span class="eqno">(%s)' % number)
        self.add_permalink_ref(node, _("Link to this equation"))
        self.body.append("</span>")
    parts = [p for p in node.astext().split("\n\n") if p.strip()]
    parts = [r"\begin{split}" + p + r"\end{split}" if r"\\" in p else p for p in parts]
    tex = r"\\".join(parts)
    if len(parts) > 1:
        tex = r"\begin{align}\begin{aligned}" + tex + r"\end{aligned}\end{align}"
    self.body.append(_svg(self, node, tex, display=True) + "</div>\n")
    raise nodes.SkipNode


def _config_inited(app, config) -> None:
    root = Path(app.confdir)
    if available(root):
        config.html_math_renderer = RENDERER
        logger.info("ldf_math: math rendered to SVG at build time with %s", SCRIPT)


def _page_context(app, pagename, templatename, context, doctree) -> None:
    """Put the page's glyph outlines and MathJax's SVG stylesheet before the page's body."""
    jax = getattr(app, "ldf_mathjax", None)
    if jax is None or jax.page != pagename or "body" not in context:
        return
    if jax.css is None:
        jax.css = jax.ask(op="css")["css"]
    css = re.sub(r"\s+", " ", jax.css).strip()
    context["body"] = (f'<style>{css}</style>' + jax.ask(op="defs")["html"] + context["body"])
    jax.page = None


def _build_finished(app, exception) -> None:
    jax = getattr(app, "ldf_mathjax", None)
    if jax is not None:
        jax.close()
        app.ldf_mathjax = None


def setup(app):
    app.add_html_math_renderer(RENDERER, (visit_math, None), (visit_displaymath, None))
    app.connect("config-inited", _config_inited, priority=450)
    app.connect("html-page-context", _page_context, priority=950)
    app.connect("build-finished", _build_finished)
    # One Node process renders the formulas of the page being written: pages must be written in
    # one process, one after the other.
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": False}
