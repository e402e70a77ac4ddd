// Render TeX to SVG at build time with the pinned MathJax 3 (web/node_modules/mathjax), so the
// pages carry finished SVG and load no MathJax (2.1 MB) at all.  Driven by book/_ext/ldf_math.py.
//
// Protocol: one JSON request per line on stdin, one JSON reply per line on stdout.
//   {"op": "page"}                          start a page: forget the glyphs of the previous one
//   {"op": "tex", "tex": "...", "display": true|false}
//        -> {"html": "<mjx-container ...>", "error": null | "TeX error message"}
//   {"op": "defs"}  -> {"html": "<svg ...><defs>glyphs used on this page</defs></svg>"}
//   {"op": "css"}   -> {"css": "MathJax's stylesheet for SVG output"}
// Glyph outlines go into one hidden <svg> per page (fontCache "global") that every formula
// references with <use>: a glyph is stored once per page instead of once per formula.
"use strict";
const path = require("path");
const readline = require("readline");

const es5 = path.join(__dirname, "node_modules", "mathjax", "es5");
let texError = null;
require(path.join(es5, "node-main.js")).init({
  loader: { paths: { mathjax: es5 }, load: ["input/tex-full", "output/svg"] },
  // An unknown macro or a syntax error must fail the build (ldf_math.py warns, -W fails), not
  // show up as red text on a page: drop the packages that hide errors and record each error.
  tex: {
    packages: { "[-]": ["noundefined", "noerrors"] },
    formatError: (jax, err) => { texError = err.message; return jax.formatError(err); },
  },
  svg: { fontCache: "global" },
  startup: { typeset: false },
}).then((MathJax) => {
  const adaptor = MathJax.startup.adaptor;
  const cache = () => MathJax.startup.output.fontCache;
  const reply = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  rl.on("line", (line) => {
    let req;
    try { req = JSON.parse(line); } catch (e) { reply({ error: "bad request: " + e.message }); return; }
    try {
      if (req.op === "page") {
        cache().clearCache();
        reply({ ok: true });
      } else if (req.op === "tex") {
        texError = null;
        const node = MathJax.tex2svg(req.tex, { display: !!req.display });
        reply({ html: adaptor.outerHTML(node), error: texError });
      } else if (req.op === "defs") {
        reply({ html: '<svg style="display: none;" id="MJX-SVG-global-cache" aria-hidden="true">'
                      + adaptor.outerHTML(cache().getCache()) + "</svg>" });
      } else if (req.op === "css") {
        reply({ css: adaptor.textContent(MathJax.svgStylesheet()) });
      } else {
        reply({ error: "unknown op " + req.op });
      }
    } catch (e) {
      reply({ error: String(e && e.message || e) });
    }
  });
}).catch((e) => { process.stderr.write("mathjax-render: " + e + "\n"); process.exit(1); });
