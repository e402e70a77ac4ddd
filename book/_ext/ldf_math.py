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
* each formula's ``aria-label`` is its TeX written as text (:func:`spoken`: ``\\frac{Q}{\\beta}``
  reads "Q / β", ``\\le`` "≤"), so a screen reader does not spell out backslashes and braces.

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
from sphinx.transforms.post_transforms import SphinxPostTransform
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


_GREEK = {n: c for n, c in zip(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta lambda mu nu xi pi rho sigma tau phi "
    "varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Phi Psi Omega".split(),
    "αβγδεεζηθλμνξπρστφφχψωΓΔΘΛΞΠΣΦΨΩ")}
_SYMBOLS = {"cdot": "·", "times": "×", "ge": "≥", "geq": "≥", "le": "≤", "leq": "≤", "ne": "≠",
            "neq": "≠", "approx": "≈", "sim": "~", "to": "→", "rightarrow": "→", "leftarrow": "←",
            "infty": "∞", "ll": "≪", "gg": "≫", "in": "∈", "sum": "Σ", "prod": "Π", "pm": "±",
            "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊", "rfloor": "⌋", "ldots": "…", "cdots": "…",
            "dots": "…", "mid": "|", "propto": "∝", "partial": "∂", "lvert": "|", "rvert": "|"}


def spoken(tex: str) -> str:
    """A formula's TeX as plain text for a screen reader (its ``aria-label``).

    >>> spoken(r"t \\;\\ge\\; \\max\\!\\left(\\frac{Q}{\\beta},\\; \\frac{W}{\\pi}\\right).")
    't ≥ max(Q / β, W / π).'
    >>> spoken(r"\\text{KV bytes} = 2 \\cdot n_{\\text{layers}}")
    'KV bytes = 2 · n_layers'
    """
    t = " ".join(tex.split())
    t = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*\\?", "", t)
    t = re.sub(r"\\[,;:! ]|\\q?quad(?![A-Za-z])|~", " ", t)
    t = re.sub(r"\\([A-Za-z]+)(?![A-Za-z])",
               lambda m: _GREEK.get(m.group(1), _SYMBOLS.get(m.group(1), m.group(0))), t)
    for _ in range(4):   # innermost first: \frac{a}{b} -> a / b (parenthesised when compound)
        t = re.sub(r"([_^])\{([^{}]*)\}", r"\1\2", t)
        t = re.sub(r"\\(?:text|mathrm|mathit|mathbf|operatorname|textrm|textit|mathsf|mathtt|boldsymbol)"
                   r"\s*\{([^{}]*)\}", r"\1", t)
        t = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}",
                   lambda m: " / ".join(x.strip() if re.fullmatch(r"[\w.·]+", x.strip()) else f"({x.strip()})"
                                        for x in (m.group(1), m.group(2))), t)
        t = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"√(\1)", t)
    t = re.sub(r"\\([A-Za-z]+)", r"\1", t)
    t = t.replace("{", "").replace("}", "").replace("\\", " ")
    t = re.sub(r"\s+([,.)])", r"\1", re.sub(r"\(\s+", "(", " ".join(t.split())))
    return re.sub(r"(\w) \(", r"\1(", t)


def _svg(self, node, tex: str, display: bool) -> str:
    jax = _jax(self)
    docname = self.builder.current_docname
    if jax.page != docname:          # pages are written one at a time (parallel_write_safe False)
        jax.ask(op="page")
        jax.page = docname
    out = jax.ask(op="tex", tex=tex, display=display)
    if out.get("error"):
        logger.warning("TeX error %r in %s", out["error"], tex, location=node, type="ldf", subtype="math")
    label = html.escape(spoken(tex), quote=True)
    # The container is the image a screen reader announces (the formula as text); the SVG inside is
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


def plain_alt(text: str) -> str:
    """An image's alt text as a screen reader should get it: ``$TeX$`` as :func:`spoken` text,
    no Markdown markers (backticks, ``**``/``*`` emphasis).

    >>> plain_alt("against $\\\\alpha$ for `T_pre` tokens, the *modelled* bytes")
    'against α for T_pre tokens, the modelled bytes'
    """
    text = re.sub(r"\$([^$]+)\$", lambda m: spoken(m.group(1)), text)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    return re.sub(r"(\*{1,2})(?=\S)(.+?)(?<=\S)\1", r"\2", text)


class PlainAltTexts(SphinxPostTransform):
    """Every image's alt text (after translation) without TeX or Markdown markup (:func:`plain_alt`)."""

    default_priority = 900
    formats = ("html",)

    def run(self, **kwargs) -> None:
        for img in self.document.findall(nodes.image):
            if img.get("alt"):
                img["alt"] = plain_alt(img["alt"])


def setup(app):
    app.add_post_transform(PlainAltTexts)
    app.add_html_math_renderer(RENDERER, (visit_math, None), (visit_displaymath, None))
    app.connect("config-inited", _config_inited, priority=450)
    app.connect("html-page-context", _page_context, priority=950)
    app.connect("build-finished", _build_finished)
    # One Node process renders the formulas of the page being written: pages must be written in
    # one process, one after the other.
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": False}
