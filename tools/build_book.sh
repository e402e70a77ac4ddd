#!/usr/bin/env bash
# Build the web book into _build/html, with every script, stylesheet and font served by the site itself.
#
#   bash tools/build_book.sh            (from anywhere; the repository root is found from this file)
#
# 1. With npm: `npm ci` in web/ installs the pinned browser libraries of web/package-lock.json
#    (require.js, @jupyter-widgets/html-manager, MathJax 3, Vega, Vega-Lite, vega-embed, Pyodide) and
#    the files the pages need are copied to web/dist/_vendor/.  Pyodide (the Python runtime of the
#    planner page, book/planner.md) goes to _vendor/pyodide/: only that page's script fetches it
#    (book/_ext/ldf_planner.py, which also zips the package's core into the site).  book/_ext/ldf_book.py finds them,
#    adds web/dist to html_extra_path (copied to the site root as _vendor/, NOT under _static/,
#    whose js/css Jupyter Book injects into every page) and points myst-nb at them.  MathJax is
#    not copied: book/_ext/ldf_math.py runs it under Node.js (web/mathjax-render.js) while
#    building and writes each formula into the page as SVG.
# 2. Without npm (and without a previous web/dist/_vendor): the book still builds, with CDN URLs,
#    and this script prints one warning line saying the pages will need the internet.
# 3. jupyter-book build . --all -W --keep-going   (warnings fail the build), while step 4 runs.
# 4. The 简体中文 edition from the same sources: _config.yml with locale/zh_CN/_config.yml merged
#    over it (language zh_CN; Sphinx translates through locale/zh_CN/LC_MESSAGES/*.po), built the
#    same way into _build/html/zh_CN/ (book/_ext/ldf_i18n.py links each page to its translation).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JB="${JUPYTER_BOOK:-}"
if [ -z "$JB" ]; then
  if [ -x "$ROOT/.venv/bin/jupyter-book" ]; then JB="$ROOT/.venv/bin/jupyter-book"; else JB="jupyter-book"; fi
fi
DIST="$ROOT/web/dist/_vendor"
NM="$ROOT/web/node_modules"

if command -v npm >/dev/null 2>&1; then
  # --ignore-scripts: the packages are plain browser bundles; no install script is needed.
  (cd "$ROOT/web" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  rm -rf "$ROOT/web/dist"
  mkdir -p "$DIST/html-manager" "$DIST/vega" "$DIST/vega-lite" "$DIST/vega-embed"
  cp "$NM/requirejs/require.js" "$DIST/require.js"
  cp "$ROOT/web/require-config.js" "$DIST/require-config.js"   # maps embed-amd's font folder to _vendor/
  # embed-amd.js loads its webpack chunks' fonts (Font Awesome) relative to itself: copy them too.
  find "$NM/@jupyter-widgets/html-manager/dist" -maxdepth 1 -type f \
       \( -name 'embed-amd.js' -o -name '*.woff2' -o -name '*.woff' -o -name '*.ttf' -o -name '*.eot' -o -name '*.svg' \) \
       -exec cp {} "$DIST/html-manager/" \;
  cp "$NM/vega/build/vega.min.js" "$DIST/vega/"
  cp "$NM/vega-lite/build/vega-lite.min.js" "$DIST/vega-lite/"
  cp "$NM/vega-embed/build/vega-embed.min.js" "$DIST/vega-embed/"
  # Pyodide: the runtime, its standard library and lock file; no packages (the core is stdlib only)
  mkdir -p "$DIST/pyodide"
  for f in pyodide.mjs pyodide.asm.mjs pyodide.asm.wasm python_stdlib.zip pyodide-lock.json; do
    cp "$NM/pyodide/$f" "$DIST/pyodide/"
  done
  for p in requirejs @jupyter-widgets/html-manager mathjax vega vega-lite vega-embed pyodide; do
    printf '%s %s\n' "$p" "$(node -p "require('$NM/$p/package.json').version" 2>/dev/null || echo '?')"
  done > "$DIST/VERSIONS.txt"
  unset LDF_ASSETS_WARNED
elif [ -f "$DIST/require.js" ]; then
  echo "build_book: npm not found; using the web assets already in web/dist/_vendor/"
else
  echo "WARNING: npm not found - the book is built with CDN URLs for require.js, ipywidgets, MathJax and Vega: its pages will need the internet to show widgets, math and calculators (install Node.js/npm and rerun for an offline site)."
  export LDF_ASSETS_WARNED=1   # book/_ext/ldf_book.py then stays quiet: one warning line, not two.
fi

# A clean output folder: files of an earlier build (or an earlier layout of _vendor/) do not linger.
rm -rf "$ROOT/_build/html" "$ROOT/_build/zh_CN"
# The two editions build at once, one per core (each Sphinx build is mostly one process; on two
# cores this saves about a minute).  The English build's log is printed when it ends.
mkdir -p "$ROOT/_build/zh_CN"
EN_LOG="$ROOT/_build/en-build.log"
"$JB" build . --all -W --keep-going > "$EN_LOG" 2>&1 &
EN_PID=$!

PYBIN="python3"; [ -x "$ROOT/.venv/bin/python" ] && PYBIN="$ROOT/.venv/bin/python"
"$PYBIN" - "$ROOT" <<'PY'
import sys
from pathlib import Path
import yaml
root = Path(sys.argv[1])
def merge(a, b):
    return {**a, **{k: merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
                    for k, v in b.items()}}
cfg = merge(yaml.safe_load((root / "_config.yml").read_text()),
            yaml.safe_load((root / "locale/zh_CN/_config.yml").read_text()))
# Jupyter Book resolves local extensions against the config file's folder: give the real one.
exts = cfg["sphinx"]["local_extensions"]
cfg["sphinx"]["local_extensions"] = {k: str(root / v) for k, v in exts.items()}
(root / "_build/zh_CN/_config.yml").write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False))
PY
ZH_STATUS=0
"$JB" build . --all -W --keep-going --config "$ROOT/_build/zh_CN/_config.yml" --path-output "$ROOT/_build/zh_CN" || ZH_STATUS=$?
EN_STATUS=0
wait "$EN_PID" || EN_STATUS=$?
echo "--- the English edition's build ---"
cat "$EN_LOG"
if [ "$EN_STATUS" -ne 0 ] || [ "$ZH_STATUS" -ne 0 ]; then
  echo "build_book: failed (English: exit $EN_STATUS, 简体中文: exit $ZH_STATUS)" >&2
  exit 1
fi
mv "$ROOT/_build/zh_CN/_build/html" "$ROOT/_build/html/zh_CN"
echo "build_book: English edition in _build/html/, 简体中文 edition in _build/html/zh_CN/"
