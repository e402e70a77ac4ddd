"""The web planner ("Plan a deployment", ``book/planner.md``): the CLI's own code in the browser.

Without a browser (always run):

* the core zip the site serves holds ``llm_dataflow/__init__.py``, ``__main__.py`` and
  ``llm_dataflow/core/`` only, imports without torch or numpy, and its ``main(argv)`` prints what
  the package's CLI prints;
* every option of the ``plan`` command appears in the page's spec with its flag, its default and
  its ``--help`` text (the page follows the parser: a new option needs no page edit), and every
  label the page has is translated in the Chinese edition;
* every row label ``plan`` can print (its table code, and representative plans) has a ``row_`` label
  translated in Chinese; every option's ``--help`` text has a ``help_<dest>`` label equal to the
  parser's text, translated in Chinese (the English page shows the parser's own).

In headless Chromium, over a local server that gzips what it sends (as a web host does), for
both editions at 1280 and 390 px, one cold page load each, then several inputs on it
(``test_planner_in_the_browser``):

* each input's table (as rows and as the command's text), JSON, memory bar and decode chart equal
  ``plan`` run in Python on the argv the page shows as its command line: at both widths of both
  editions a sliding-window model (Mistral-7B-v0.1 at 32,768 tokens), TP 8 (Llama-3.1-70B on
  H100-SXM) and SGLang's convention (``--mem-fraction-static``, set in the folded engine
  settings); in each edition, half of them at each width, presets, a deployment that does not fit,
  a pasted, a dropped and a chosen real ``config.json`` (``tests/data/``), ``--json``, and
  refusals (a layout, a count, a config field, an empty GPU field), each shown with the CLI's
  message naming the field, the field outlined;
* each field's help is the option's --help in the edition's language, and a Chinese page joins its
  words with full-width punctuation ("默认：1", "（估计值）", never "默认: 1" or "(估计值)");
* the rows give back the command's lines (label, value, folded note), the verdict and the KV room
  first; the bar has one part per term of ``memory_terms``, in order, in GiB as the core's fmt_gib
  prints it; the parts sum to the device's runtime total when the deployment fits and exceed it by
  the over-capacity the bar draws when not; its GiB figures are the table's;
* typing a GPU name one key at a time ("L40S") never shows an error or plans "L4"; a pause on
  "L40" shows "keep typing" and plans nothing;
* no console error, no request to another host; nothing of the form or the results wider than
  the column or scrolled sideways at either width (the command's text wraps); on the phone every
  control is a 44 px touch target and the sticky summary shows the verdict while the form is on
  screen;
* contrast (desktop visit, light and dark theme through the theme's own button): every bar part,
  swatch and chart point at >= 3:1 against the page behind it;
* on the cold visit, once the first plan, bar and chart are drawn, the per-page checks
  ``tests/test_browser.py`` gives every other page (``tests/_browsers.py``: ``check_page``,
  ``layout_problems``, ``figure_problems``, and at 1280 px ``wide_results``): that file leaves
  this page out: each edition and width starts Pyodide in one test, not two;
* the download's size is in the page's HTML before it starts and the page counts it as it comes;
  the bytes the server sends (gzip) <= 8 MB; interactive <= 10 s cold; each change answered in
  < 200 ms after the reader's pause, and no task of the page's main thread over 200 ms while it
  changes (the Long Tasks API) (on a machine busier than its cores, k runnable tasks per core,
  the limits widen k times: a process gets about 1/k of a core; the figures are reported as
  measured);
* the URL holds the settings: reopening it (warm cache) shows the same plan.

Also: opened from disk, or built without Pyodide, the page says why it cannot run and shows the
command; only the planner page loads Pyodide.  Figures go to ``artifacts/planner.txt``.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import io
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
import zipfile

import pytest
from _browsers import (WIDTHS as PAGE_WIDTHS, check_page, is_local, layout_problems, look,
                       require, wide_results)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("LDF_SITE_DIR", ROOT / "_build" / "html"))
DATA = pathlib.Path(__file__).parent / "data"
ARTIFACTS = ROOT / "artifacts"
PAGE = "book/planner.html"
EDITIONS = {"en": "", "zh_CN": "zh_CN/"}
WIDTHS = (1280, 390)
MAX_MB_GZIP = 8.0            # MB = 1e6 bytes transferred on a cold visit
MAX_COLD_S = 10.0            # to interactive (the first result), a quiet machine
MAX_CHANGE_MS = 200.0        # one change answered (table, bar or error); a main-thread task
TIMEOUT_MS = 120_000
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import ldf_planner  # noqa: E402

FIGURES: list[str] = []


def _share() -> float:
    """Runnable work per core (>= 1): on a machine k times busier than its cores, a process gets
    about 1/k of a core, and a time limit is widened k times (the figures are reported as measured)."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def _busy() -> bool:
    """More runnable work than cores: timings measure the neighbours as much as the page."""
    return _share() > 1.0


def _browser_cpu_s() -> float:
    """CPU seconds (user + system) used so far by this test's browser processes (Linux /proc)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        procs = {}
        for d in pathlib.Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    f = (d / "stat").read_text().rsplit(")", 1)[1].split()
                    procs[int(d.name)] = (int(f[1]), (int(f[11]) + int(f[12])) / tick)
                except (OSError, IndexError, ValueError):
                    pass
    except (OSError, ValueError):
        return 0.0
    me, total = os.getpid(), 0.0
    for pid, (ppid, cpu) in procs.items():
        p = pid
        while p in procs and p != me:
            p = procs[p][0]
        if p == me and pid != me:
            total += cpu
    return total


def cli(argv: list[str], cwd: pathlib.Path | None = None) -> tuple[int, str, str]:
    """``llm_dataflow.core.plan.main(argv)`` as the command runs it: (exit status, stdout, stderr)."""
    from llm_dataflow.core.plan import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


def error_line(stderr: str) -> str:
    """What the page shows of a refusal: the CLI's stderr from its ``error:`` line on."""
    lines = stderr.rstrip().split("\n")
    i = next(i for i, line in enumerate(lines) if " error: " in line or line.startswith("error: "))
    return "\n".join(lines[i:])


# --- without a browser ---------------------------------------------------------------------------
def test_core_zip_is_the_core_and_runs_without_torch(tmp_path):
    z = tmp_path / "core.zip"
    ldf_planner.write_core_zip(z)
    names = zipfile.ZipFile(z).namelist()
    assert {"llm_dataflow/__init__.py", "llm_dataflow/__main__.py", "llm_dataflow/core/plan.py"} <= set(names)
    assert all(n in ("llm_dataflow/__init__.py", "llm_dataflow/__main__.py", "llm_dataflow/data/published_measurements.csv")
               or n.startswith("llm_dataflow/core/") for n in names), names
    assert not any("__pycache__" in n for n in names)
    again = tmp_path / "again.zip"
    ldf_planner.write_core_zip(again)
    assert z.read_bytes() == again.read_bytes(), "the zip differs between two builds of the same sources"
    folder = tmp_path / "Llama-3.1-8B-Instruct"
    folder.mkdir()
    shutil.copy(DATA / "Llama-3.1-8B-Instruct" / "config.json", folder / "config.json")
    argv = ["plan", "Llama-3.1-8B-Instruct/config.json", "--hardware", "H100-SXM", "--batch", "4", "--context", "2048"]
    # as the page's worker runs it: python -m llm_dataflow ARGV (runpy), from the zip alone
    code = ("import sys, json, runpy; sys.path.insert(0, sys.argv[1]); argv = json.loads(sys.argv[2]); "
            "sys.argv = ['python -m llm_dataflow', *argv]\n"
            "try:\n    runpy.run_module('llm_dataflow', run_name='__main__', alter_sys=False)\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'matplotlib'))\n"
            "assert not heavy, heavy")
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", code, str(z), json.dumps(argv)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    FIGURES.append(f"core zip: {z.stat().st_size:,} B; main(argv) from the zip in a fresh Python "
                   f"(start included): {time.perf_counter() - t:.2f} s")
    assert run.returncode == 0, run.stderr
    assert run.stdout == cli(argv, tmp_path)[1]


def test_every_cli_option_is_on_the_page_with_its_help_and_every_label_is_translated():
    """The page's form follows the ``plan`` parser: each option (a new one too) is in the spec the
    page builds its controls from, with its flag, default and ``--help`` text, in a group (an
    option no group names joins the folded engine settings).  Every label of the page's list is
    translated in the Chinese edition; options without a label show their flag."""
    from babel.messages.pofile import read_po

    text = (ROOT / "book" / "planner.md").read_text(encoding="utf-8")
    block = text.split("```{ldf-planner}", 1)[1].split("```", 1)[0]
    labels = dict(re.findall(r"^- `([^`]+)`: (.+)$", block, re.M))
    with open(ROOT / "locale" / "zh_CN" / "LC_MESSAGES" / "book" / "planner.po", "rb") as f:
        zh = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    options = ldf_planner.cli_options()
    assert {o["dest"] for o in options} >= {"model", "hardware", "tp", "batch", "context", "prompt", "weights", "kv"}
    for o in options:
        assert o["flag"] or o["kind"] == "model", o
        assert o["help"], f"{o['flag']}: no --help text for the page to show"
    grouped = {d for g in ldf_planner.GROUPS for d in g["dests"]}
    rest = [g for g in ldf_planner.GROUPS if g.get("rest")]
    assert len(rest) == 1 and rest[0].get("folded"), "one folded group takes the options no group names"
    unlabelled = [o["dest"] for o in options if o["dest"] not in labels]
    ungrouped = [o["dest"] for o in options if o["dest"] not in grouped]
    FIGURES.append(f"plan options: {len(options)}; without a page label (shown by their flag): {unlabelled or 'none'}; "
                   f"in no group (shown in the engine settings): {ungrouped or 'none'}")
    for key, label in labels.items():
        msg = f"`{key}`: {label}"
        assert zh.get(msg), f"{msg!r} is not translated in locale/zh_CN/LC_MESSAGES/book/planner.po"
        if not key.startswith(("row_", "hardware")) and re.search(r"[A-Za-z]{3}", label.replace("{", "")):
            assert re.search(r"[\u4e00-\u9fff]", zh[msg]) or key in ("model_config", "bar_caption"), (msg, zh[msg])
    for key in ldf_planner.PAGE_SKIPS:
        assert f"note_{key}" in labels


def _page_labels(directive: str = "ldf-planner") -> dict[str, str]:
    """``{key: English label}`` of a directive's list in ``book/planner.md``."""
    text = (ROOT / "book" / "planner.md").read_text(encoding="utf-8")
    block = text.split(f"```{{{directive}}}", 1)[1].split("```", 1)[0]
    return dict(re.findall(r"^- `([^`]+)`: (.+)$", block, re.M))


def _zh_catalog() -> dict[str, str]:
    """The Chinese planner page's translations: msgid -> msgstr, translated (not empty, not fuzzy)."""
    from babel.messages.pofile import read_po

    with open(ROOT / "locale" / "zh_CN" / "LC_MESSAGES" / "book" / "planner.po", "rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}


def _row_labels_in_source() -> set[str]:
    """Every row label ``plan``'s table code can print: the string heading each (label, value) pair
    in ``core/plan.py``'s ``_table`` and its ``_*_row``/``_*_rows`` helpers (indented sub-rows
    stripped, as the page strips them)."""
    import ast

    tree = ast.parse((ROOT / "src" / "llm_dataflow" / "core" / "plan.py").read_text(encoding="utf-8"))
    out = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and (fn.name == "_table" or fn.name.endswith(("_row", "_rows"))):
            for n in ast.walk(fn):
                if (isinstance(n, ast.Tuple) and len(n.elts) == 2 and isinstance(n.elts[0], ast.Constant)
                        and isinstance(n.elts[0].value, str)):
                    out.add(n.elts[0].value.strip())
    return out


def test_every_row_the_command_prints_has_a_label_in_both_editions(tmp_path):
    """Each row label of ``plan``'s table has a ``row_<label>`` entry in the page's list (the key
    planner.js looks up: the label as printed, less its indent) and a Chinese translation; before
    this test ``engine``, ``layout``, ``whole batch``, ``with graphs`` and ``warning`` had none and
    showed in English between translated rows.  Checked on the source (every label the table code
    can print) and on representative plans: vLLM and SGLang, EP with dp = 1 and dp = 8, sliding
    windows (Mistral-7B, Gemma-2), a misfit, a published range with its rows, CUDA graphs that do
    not fit where eager does, and a config.json that omits keys (warnings)."""
    labels, zh = _page_labels(), _zh_catalog()
    source = _row_labels_in_source()
    folder = tmp_path / "omits"
    folder.mkdir()
    cfg = json.loads((DATA / "Llama-3.1-8B-Instruct" / "config.json").read_text(encoding="utf-8"))
    cfg.pop("rms_norm_eps")
    (folder / "config.json").write_text(json.dumps(cfg))
    plans = [
        ["Llama-3-8B", "--hardware", "H100-SXM", "--batch", "8", "--context", "4096"],
        ["Llama-3-8B", "--hardware", "H100-SXM", "--batch", "8", "--engine", "sglang", "--mem-fraction-static", "0.85"],
        ["DeepSeek-V3", "--hardware", "H200", "--tp", "8", "--ep", "8", "--weights", "fp8", "--batch", "64"],
        ["DeepSeek-V3", "--hardware", "H200", "--tp", "1", "--ep", "8", "--weights", "fp8", "--batch", "16"],
        ["Mistral-7B-v0.1", "--hardware", "H100-SXM", "--batch", "8", "--context", "32768"],
        ["Gemma-2-9B", "--hardware", "L4", "--batch", "64", "--context", "8192"],
        ["Llama-2-7B", "--hardware", "A100-80GB-SXM", "--batch", "1", "--context", "1024"],
        ["Qwen2.5-7B", "--hardware", "RTX-4090", "--weights", "int4", "--context", "4096",
         "--gpu-memory-utilization", "0.97", "--engine-version", "0.20"],
        ["omits/config.json", "--hardware", "H100-SXM", "--batch", "2", "--context", "2048"],
    ]
    printed = set()
    for argv in plans:
        code, out, err = cli(["plan", *argv], tmp_path)
        assert code == 0, (argv, err)
        lines = out.rstrip("\n").split("\n")
        col = re.match(r"^\S.*?\s{2,}(?=\S)", lines[0]).end()
        printed |= {line[:col].strip() for line in lines}
    for must in ("engine", "layout", "whole batch", "with graphs", "warning", "rows", "routed experts"):
        assert must in printed, must
    assert printed <= source, f"rows the source scan misses: {printed - source}"
    FIGURES.append(f"plan's row labels: {len(source)} in the source, {len(printed)} printed by {len(plans)} plans")
    for row in sorted(source):
        key = f"row_{row}"
        assert key in labels, f"{row!r}: no `{key}` label in book/planner.md's {{ldf-planner}} list"
        assert labels[key] == row, (key, labels[key])
        msg = f"`{key}`: {row}"
        assert zh.get(msg), f"{msg!r} is not translated in locale/zh_CN/LC_MESSAGES/book/planner.po"
    for row, want in (("engine", "引擎"), ("layout", "KV 布局"), ("whole batch", "整个 batch")):
        assert zh[f"`row_{row}`: {row}"] == f"`row_{row}`：{want}"


@pytest.mark.parametrize("directive,options", [("ldf-planner", "cli_options"), ("ldf-explain", "explain_options")])
def test_every_option_help_is_one_text_and_translated(directive, options):
    """Each option's ``--help`` text has a ``help_<dest>`` label (the explain box's positional
    argument has ``log_hint``): in English it is the parser's text byte for byte (one text, not
    two; the English page shows the parser's own, the build warns if they differ), and the
    Chinese catalog translates it (not empty, not fuzzy, in Chinese).  24 texts: the planner's 21
    options and the explain box's --config, --hardware and --json."""
    labels, zh = _page_labels(directive), _zh_catalog()
    opts = getattr(ldf_planner, options)()
    helps = {o["dest"]: o["help"] for o in opts if not (directive == "ldf-explain" and o["kind"] == "model")}
    assert len(helps) == {"ldf-planner": 21, "ldf-explain": 3}[directive], sorted(helps)
    for dest, text in helps.items():
        key = f"{ldf_planner.HELP_PREFIX}{dest}"
        assert labels.get(key) == text, f"`{key}` in book/planner.md is not {dest}'s --help text {text!r}"
        msg = f"`{key}`: {text}"
        assert zh.get(msg), f"{msg!r} is not translated (or fuzzy) in locale/zh_CN/LC_MESSAGES/book/planner.po"
        assert zh[msg].startswith(f"`{key}`：") and re.search(r"[\u4e00-\u9fff]", zh[msg]), zh[msg]
        # a flag stays a flag (the page turns smart quotes off for these items: no "–tp")
        for flag in re.findall(r"--[a-z][\w-]*", text):
            assert flag in zh[msg], (flag, zh[msg])
    # the English spec leaves them out (the page reads the parser); another edition keeps them
    spec = {**{f"help_{d}": h for d, h in helps.items()}, "tp": "x"}
    assert ldf_planner.help_labels(spec, opts, "en", directive) == {"tp": "x"}
    assert ldf_planner.help_labels(spec, opts, "zh_CN", directive) == spec


def test_explain_box_follows_its_parser_and_every_label_is_translated():
    """The explain box ({ldf-explain}) builds its form from ``explain``'s parser: the pasted text
    (the positional argument), ``--config``, ``--hardware`` (the plan command's GPUs suggested) and
    ``--json``, each with its ``--help`` text; each of its labels is translated, one per term the
    command can print (``term_<name>``); its example is a stored log, its config.json and a GPU."""
    from babel.messages.pofile import read_po

    import importlib

    ex = importlib.import_module("llm_dataflow.core.explain")

    text = (ROOT / "book" / "planner.md").read_text(encoding="utf-8")
    block = text.split("```{ldf-explain}", 1)[1].split("```", 1)[0]
    labels = dict(re.findall(r"^- `([^`]+)`: (.+)$", block, re.M))
    with open(ROOT / "locale" / "zh_CN" / "LC_MESSAGES" / "book" / "planner.po", "rb") as f:
        zh = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    options = ldf_planner.explain_options()
    assert [o["dest"] for o in options] == ["source", "config", "hardware", "json"], options
    assert all(o["help"] for o in options)
    assert options[2]["suggestions"] == [o for o in ldf_planner.cli_options() if o["dest"] == "hardware"][0]["suggestions"]
    assert {o["dest"] for o in options} <= set(labels)
    assert {f"term_{k}" for k in ex._LABELS} <= set(labels), "a term the command prints has no label"
    for k, label in ex._LABELS.items():
        assert labels[f"term_{k}"] == label, (k, label)
    for key, label in labels.items():
        msg = f"`{key}`: {label}"
        assert zh.get(msg), f"{msg!r} is not translated in locale/zh_CN/LC_MESSAGES/book/planner.po"
    example = ldf_planner.explain_example()
    assert example and example["log"] and json.loads(example["config"])["model_type"] == "llama"


def test_cli_start_and_parity():
    """``python -m llm_dataflow plan`` in a fresh process prints what main(argv) prints; its
    start-to-exit time is reported (artifacts/planner.txt)."""
    argv = ["plan", "Llama-3-8B", "--hardware", "H100-SXM", "--batch", "8", "--context", "4096", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "llm_dataflow", *argv], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    FIGURES.append(f"CLI `python -m llm_dataflow {' '.join(argv)}`: {time.perf_counter() - t:.2f} s wall "
                   f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    assert run.returncode == 0, run.stderr
    assert run.stdout == cli(argv)[1]


# --- in the browser --------------------------------------------------------------------------------
class _GzipHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site as a web host does: gzip for a client that accepts it (not for files that
    are compressed already), a cache lifetime so that a second visit is warm.  ``sent`` counts the
    body bytes sent (the page's Web Worker fetches Pyodide: counted here, whoever asks)."""

    cache: dict[str, bytes] = {}
    sent = 0
    STORED = (".zip", ".png", ".jpg", ".woff2", ".woff", ".ico", ".gz")

    def log_message(self, *args):
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def copyfile(self, source, outputfile):
        data = source.read()
        type(self).sent += len(data)
        outputfile.write(data)

    def do_GET(self):
        path = pathlib.Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        gz = "gzip" in self.headers.get("Accept-Encoding", "") and not path.name.endswith(self.STORED)
        if not path.is_file() or not gz:
            try:
                return super().do_GET()
            except (BrokenPipeError, ConnectionResetError):
                return None
        key = str(path)
        if key not in self.cache:
            self.cache[key] = gzip.compress(path.read_bytes(), compresslevel=6)
        body = self.cache[key]
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
            type(self).sent += len(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def guess_type(self, path):
        # a module worker and Pyodide's .mjs need a JavaScript type (Python < 3.12 maps none)
        if str(path).endswith(".mjs"):
            return "text/javascript"
        if str(path).endswith(".wasm"):
            return "application/wasm"
        return super().guess_type(path)


@pytest.fixture(scope="module")
def site():
    require((SITE / PAGE).is_file(), f"no built planner page at {SITE / PAGE} (bash tools/build_book.sh)")
    return SITE


@pytest.fixture(scope="module")
def server(site):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_GzipHandler, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser(site, chromium_browser):
    return chromium_browser     # conftest.py: one Chromium per test process


# Tasks of the main thread over 50 ms, as the Long Tasks API reports them (from the page's start).
LONG_TASKS_JS = """(() => { window.__ldfLong = [];
  try { new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__ldfLong.push([e.startTime, e.duration]); })
        .observe({type: 'longtask', buffered: true}); } catch (e) {} })();"""


class Tab:
    """One browser context (empty cache): console errors, requests to other hosts (the worker's
    too: they are recorded as they start and fail in Chromium, conftest.py's host rules)."""

    def __init__(self, browser, base: str, width: int, route: bool = False):
        phone = width < 600
        self.base = base
        self.context = browser.new_context(viewport={"width": width, "height": 844 if phone else 900},
                                           is_mobile=phone, has_touch=phone, device_scale_factor=1)
        self.context.add_init_script(LONG_TASKS_JS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.context.on("request", lambda r: None if is_local(r.url, base) else self.external.append(r.url))
        if route:   # a page opened from disk: abort what leaves it
            self.page.route("**/*", lambda r: r.continue_() if is_local(r.request.url, base) else r.abort())

    def close(self):
        self.context.close()


def _wait_ready(page):
    page.wait_for_function("""() => { const r = document.querySelector('.ldf-planner');
        return r && (r.dataset.ldfReady || ['failed', 'unavailable'].includes(r.dataset.ldfState)); }""",
                           timeout=TIMEOUT_MS)
    page.wait_for_function("() => +document.querySelector('.ldf-planner').dataset.ldfRuns > 0", timeout=TIMEOUT_MS)
    state = page.evaluate("() => document.querySelector('.ldf-planner').dataset.ldfState")
    assert state in ("ok", "error"), page.inner_text(".ldf-planner-status")


def _settle(page, before: int):
    """Wait for the change after run ``before`` and its chart; returns the page's dataset."""
    page.wait_for_function("n => +document.querySelector('.ldf-planner').dataset.ldfRuns > n", arg=before,
                           timeout=TIMEOUT_MS)
    page.wait_for_function("""() => { const d = document.querySelector('.ldf-planner').dataset;
        return !d.ldfPending && (d.ldfState === 'error' || d.ldfChart === d.ldfRuns); }""", timeout=TIMEOUT_MS)
    return page.evaluate("() => ({...document.querySelector('.ldf-planner').dataset})")


def _runs(page) -> int:
    return int(page.evaluate("() => +document.querySelector('.ldf-planner').dataset.ldfRuns || 0"))


def _reveal(page, loc):
    """Open the folded group holding ``loc`` as a reader does: a tap or click on its summary."""
    if loc.evaluate("e => !!e.closest('details:not([open])')"):
        summary = loc.locator("xpath=ancestor::details[1]/summary")
        summary.tap() if page.viewport_size["width"] < 600 else summary.click()
        page.wait_for_function("e => !e.closest('details:not([open])')", arg=loc.element_handle())


def _set(page, dest: str, value):
    """Set one control as a reader does (select, type, tick); returns the run count before."""
    n = _runs(page)
    loc = page.locator(f"#ldf-planner-{dest}")
    _reveal(page, loc)
    tag = loc.evaluate("e => e.tagName + (e.type ? ':' + e.type : '')")
    if tag.startswith("SELECT"):
        loc.select_option(value=str(value))
    elif tag.endswith("checkbox"):
        loc.set_checked(bool(value))
    else:
        loc.fill(str(value))
    return n


def _apply(page, settings: dict) -> dict:
    n = None
    for dest, value in settings.items():
        if dest == "paste":
            folder, text = value
            n = _set(page, "model", "@config")
            page.fill("#ldf-planner-folder", folder)
            page.fill("#ldf-planner-config", text)
        elif dest == "drop":   # a file dropped on the form, as a reader drags it from their files
            folder, path = value
            n = _runs(page)
            page.evaluate("""([text, name]) => {
                const dt = new DataTransfer();
                dt.items.add(new File([text], name, {type: "application/json"}));
                document.querySelector('.ldf-planner-form').dispatchEvent(
                    new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true})); }""",
                          [pathlib.Path(path).read_text(encoding="utf-8"), "config.json"])
            page.wait_for_function("n => +document.querySelector('.ldf-planner').dataset.ldfRuns > n", arg=n)
            assert page.locator("#ldf-planner-model").input_value() == "@config"
            page.fill("#ldf-planner-folder", folder)
        elif dest == "choose":
            folder, path = value
            n = _set(page, "model", "@config")
            page.fill("#ldf-planner-folder", folder)
            before = _runs(page)
            page.set_input_files("#ldf-planner-file", str(path))
            page.wait_for_function("n => +document.querySelector('.ldf-planner').dataset.ldfRuns > n", arg=before)
        else:
            m = _set(page, dest, value)
            n = m if n is None else n
    return _settle(page, n)


def _shown_argv(page) -> list[str]:
    words = shlex.split(page.inner_text(".ldf-planner-command"))
    assert words[:3] == ["python", "-m", "llm_dataflow"], words
    return [w for w in words[3:]]


def _fmt_gib(x: float) -> str:
    from llm_dataflow.core.units import fmt_gib

    return fmt_gib(x)


# What the page shows of a plan: the rows, the raw text, the JSON view, the bar's legend.
SHOWN_JS = """() => {
  const q = (s) => document.querySelector(s);
  const rows = Array.from(document.querySelectorAll('.ldf-planner-verdict .ldf-row, .ldf-planner-rows:not(.ldf-planner-first) > .ldf-row'))
    .filter(r => r.getClientRects().length)
    .map(r => [r.dataset.label, r.querySelector('.ldf-row-value').textContent,
               (r.querySelector('.ldf-row-note-text') || {textContent: ''}).textContent]);
  const legend = Array.from(document.querySelectorAll('.ldf-bar-legend li'))
    .map(e => [e.dataset.key, +e.dataset.bytes, e.dataset.text]);
  const parts = Array.from(document.querySelectorAll('.ldf-bar-strip .ldf-bar-part')).map(e => [e.dataset.key, +e.dataset.bytes]);
  return {rows, legend, parts, table: q('.ldf-planner-table').textContent,
          json: q('.ldf-planner-json').hidden ? null : q('.ldf-planner-json').textContent,
          result: q('.ldf-planner-result').textContent,
          warnings: q('.ldf-planner-warnings').hidden ? [] : Array.from(q('.ldf-planner-warnings').querySelectorAll('li')).map(e => e.textContent),
          capacity: +q('.ldf-planner-bar').dataset.capacity, over: !!q('.ldf-bar-over')}; }"""


def _check(page, cwd: pathlib.Path, expect_error: str | None = None, dest: str | None = None) -> None:
    """The page's outputs for its current settings equal ``plan`` run on the argv it shows."""
    argv = _shown_argv(page)
    page_argv = argv[:argv.index("--plot")] + argv[argv.index("--plot") + 2:] if "--plot" in argv else argv
    code, out, err = cli(page_argv, cwd)
    body = page.inner_text("article") if page.locator("article").count() else page.inner_text("body")
    assert "Traceback" not in body
    if expect_error is not None:
        assert code != 0, f"{argv}: the CLI accepted it"
        shown = page.inner_text(".ldf-planner-error")
        assert shown == error_line(err), (argv, shown, err)
        assert expect_error in shown, shown
        if dest:
            assert page.locator(f"#ldf-planner-{dest}").get_attribute("aria-invalid") == "true", dest
        assert page.locator(".ldf-planner-outputs").is_hidden()
        return
    assert code == 0, err
    assert page.locator(".ldf-planner-error").is_hidden()
    s = page.evaluate(SHOWN_JS)
    json_argv = [a for a in page_argv if a != "--json"] + ["--json"]
    jcode, jout, _ = cli(json_argv, cwd)
    assert s["result"] == jout
    r = json.loads(jout)
    if "--json" in page_argv:   # the page prints what the command prints: the JSON
        assert s["json"] == out.rstrip("\n")
    else:
        # the text, as printed (one click away), and as rows: each row's label, value and folded
        # note give back the command's line; the verdict and the KV room come first
        assert s["table"] == out.rstrip("\n")
        lines = out.rstrip("\n").split("\n")
        col = re.match(r"^\S.*?\s{2,}(?=\S)", lines[0]).end()
        want = {line[:col].strip(): line[col:] for line in lines}
        assert [x[0] for x in s["rows"][:2]] == ["memory", "KV room"], s["rows"][:3]
        assert sorted(x[0] for x in s["rows"]) == sorted(want), (sorted(want), [x[0] for x in s["rows"]])
        for label, value, note in s["rows"]:
            assert (value + " " + note if note else value) == want[label], (label, value, note, want[label])
    for w in r.get("warnings") or []:   # the command's warnings, shown
        assert w in s["warnings"], (w, s["warnings"])
    # the bar: every term of memory_terms in order, in the table's GiB
    terms = r["memory_terms"]
    shown_terms = [(t["name"], t["bytes"], _fmt_gib(t["bytes"])) for t in terms
                   if t["bytes"] > 0 or t["name"] == "kv_asked"]
    legend = [tuple(x) for x in s["legend"] if x[0] != "over"]
    assert legend == shown_terms, (legend, shown_terms)
    assert [tuple(x) for x in s["parts"]] == [(t["name"], t["bytes"]) for t in terms if t["bytes"] > 0]
    cap, used = r["runtime_memory_bytes"], sum(t["bytes"] for t in terms)
    assert s["capacity"] == cap
    if r["fits"]:
        assert math.isclose(used, cap, rel_tol=1e-9), (used, cap)
        assert not s["over"]
    else:   # drawn past the device's edge, by what the table says does not fit
        assert used > cap and s["over"], (used, cap)
        over = dict((k, (b, t)) for k, b, t in s["legend"])["over"]
        assert math.isclose(over[0], used - cap, rel_tol=1e-9) and over[1] == _fmt_gib(used - cap)
    if "--json" not in page_argv:   # the bar's figures are the table's
        engine, gib = want["engine memory"], {k: t for k, _, t in shown_terms}
        assert f"weights {gib['weights']}" in engine, engine
        if r["engine"] == "vllm":
            assert f"activations {gib['activations']}" in engine and f"non-torch ≈ {gib['non_torch']}" in engine, engine
        else:   # SGLang: activations and CUDA graphs live outside the fraction
            assert f"{gib['non_torch']} allocated before loading" in engine and "activations" not in gib, engine
        assert want["device memory"].startswith(_fmt_gib(cap) + " "), want["device memory"]
        room = sum(t["bytes"] for t in terms if t["name"] in ("kv_asked", "kv_free"))
        assert f"({_fmt_gib(room)} per GPU)" in want["KV room"], (room, want["KV room"])
    # the chart is drawn after the table, one run of the command per batch: wait for this
    # batch's point (seconds on a loaded machine), never a fixed sleep
    page.wait_for_function("([b, t]) => [...document.querySelectorAll('.ldf-planner-chart circle.ldf-chart-point')]"
                           ".some(e => +e.dataset.batch === b && +e.dataset.s === t)",
                           arg=[r["batch"], r["decode_step_s"]], timeout=120_000)
    points = page.eval_on_selector_all(".ldf-planner-chart circle.ldf-chart-point", "els => els.map(e => [+e.dataset.batch, +e.dataset.s, e.dataset.binds, e.dataset.fits])")
    by_batch = {b: (s_, binds, fits) for b, s_, binds, fits in points}
    assert by_batch[r["batch"]] == (r["decode_step_s"], r["binds"], "1" if r["fits"] else "0")
    for b in (1, 64, 4096):   # other batches: one run of the command each
        if b in by_batch:
            ba = [a for a in json_argv]
            if "--batch" in ba:
                ba[ba.index("--batch") + 1] = str(b)
            else:
                ba[2:2] = ["--batch", str(b)]
            _, bo, _ = cli(ba, cwd)
            j = json.loads(bo)
            assert by_batch[b] == (j["decode_step_s"], j["binds"], "1" if j["fits"] else "0"), b


def _translations(edition: str):
    if edition == "en":
        return lambda s: s
    from babel.messages.pofile import read_po
    with open(ROOT / "locale" / edition / "LC_MESSAGES" / "book" / "planner.po", "rb") as f:
        table = {m.id: m.string for m in read_po(f) if m.id and m.string}
    return lambda s: table.get(s, s)


# Everything of the planner a reader must see whole: nothing past the column, nothing scrolled
# sideways or clipped (folded parts are not shown, so not checked); on a phone, each control's
# touch target (a checkbox's is its label's row; an inline "details" at WCAG 2.5.8's 24 px).
PLANNER_LAYOUT_JS = r"""(phone) => {
  const root = document.querySelector('.ldf-planner'), R = root.getBoundingClientRect();
  const where = e => `${e.tagName.toLowerCase()}.${String(e.className && e.className.baseVal === undefined ? e.className : '').split(' ')[0]} "${(e.textContent || '').trim().slice(0, 40)}"`;
  const cut = [], small = [];
  for (const e of root.querySelectorAll('*')) {
    if (!e.getClientRects().length || (e.closest('svg') && e.tagName.toLowerCase() !== 'svg')) continue;
    if (e.closest('datalist, script, noscript')) continue;
    const b = e.getBoundingClientRect();
    if (b.width && (b.right > R.right + 1 || b.left < R.left - 1)) cut.push(`${where(e)}: ${Math.round(Math.max(b.right - R.right, R.left - b.left))} px beyond the planner's column`);
    const o = getComputedStyle(e).overflowX;
    // (a text field scrolls what the reader typed inside itself, as every field does)
    if (o !== 'visible' && e.scrollWidth > e.clientWidth + 1 && !e.classList.contains('ldf-bar-strip') && !e.matches('input, textarea'))
      cut.push(`${where(e)}: ${e.scrollWidth - e.clientWidth} px hidden (overflow ${o})`);
  }
  if (phone) {
    for (const e of root.querySelectorAll('input, select, textarea, summary, button:not(.copybtn)')) {
      if (!e.getClientRects().length) continue;
      const t = e.type === 'checkbox' ? e.closest('.ldf-planner-check') : e;
      const h = t.getBoundingClientRect().height, need = e.closest('.ldf-row-note') ? 24 : 44;
      if (h < need - 0.5) small.push(`${where(e)} ${e.id || ''}: ${h.toFixed(0)} px tall (< ${need})`);
    }
  }
  return {cut, small};
}"""

# The colour of each graphic mark of the planner and of the page behind it ([mark, css colour, bg]).
MARKS_JS = r"""() => {
  const bgOf = e => { for (let b = e; b; b = b.parentElement) { const c = getComputedStyle(b).backgroundColor;
      if (c && !['rgba(0, 0, 0, 0)', 'transparent'].includes(c)) return c; } return 'rgb(255, 255, 255)'; };
  const out = [];
  const root = document.querySelector('.ldf-planner');
  const bg = bgOf(root.querySelector('.ldf-planner-bar').parentElement);
  for (const e of root.querySelectorAll('.ldf-bar-part, .ldf-bar-swatch, .ldf-chart-key')) {
    if (!e.getClientRects().length) continue;
    const cs = getComputedStyle(e);
    const solid = !['rgba(0, 0, 0, 0)', 'transparent'].includes(cs.backgroundColor) && cs.backgroundImage === 'none';
    out.push([`${e.className} ${e.dataset.key || ''}`, solid ? cs.backgroundColor : cs.borderTopColor, bg]);
  }
  for (const c of root.querySelectorAll('.ldf-planner-chart circle')) {
    const cs = getComputedStyle(c);
    const ink = cs.fill === 'none' || cs.fill === bg || cs.fill === getComputedStyle(document.body).backgroundColor ? cs.stroke : cs.fill;
    out.push([`circle ${c.getAttribute('class')}`, ink, bg]);
  }
  return out;
}"""


def _rgb(css: str) -> tuple[float, float, float]:
    vals = [float(x) for x in re.findall(r"[\d.]+", css)[:3]]
    return vals[0], vals[1], vals[2]


def _luminance(css: str) -> float:
    def lin(c):
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = _rgb(css)
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two CSS rgb() colours."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


MIN_GRAPHICS_CONTRAST = 3.0     # WCAG 1.4.11, non-text contrast


def _theme(page, mode: str) -> None:
    """Switch the page's theme with the theme's own button, as a reader does (it cycles)."""
    for _ in range(4):
        if page.evaluate("() => document.documentElement.dataset.theme") == mode:
            return
        page.locator(".theme-switch-button").first.click()
    assert page.evaluate("() => document.documentElement.dataset.theme") == mode


def _contrast_problems(page) -> list[str]:
    out = []
    for mode in ("dark", "light"):
        _theme(page, mode)
        marks = page.evaluate(MARKS_JS)
        assert len(marks) >= 10, marks
        for what, ink, bg in marks:
            c = contrast(ink, bg)
            if c < MIN_GRAPHICS_CONTRAST:
                out.append(f"{mode}: {what}: {ink} on {bg} is {c:.2f}:1 (< {MIN_GRAPHICS_CONTRAST})")
        FIGURES.append(f"contrast ({mode}): {len(marks)} marks, lowest "
                       f"{min(contrast(i, b) for _, i, b in marks):.2f}:1")
    return out


# Every error the page shows and every plan it starts while a reader types, recorded in the page.
WATCH_JS = """() => { window.__ldfSeen = [];
  const r = document.querySelector('.ldf-planner'), e = document.querySelector('.ldf-planner-error');
  new MutationObserver(() => { if (!e.hidden) window.__ldfSeen.push('error: ' + e.textContent); }).observe(e, {attributes: true, childList: true, characterData: true, subtree: true});
  new MutationObserver(() => window.__ldfSeen.push('runs ' + r.dataset.ldfRuns)).observe(r, {attributes: true, attributeFilter: ['data-ldf-runs']}); }"""


def _type_a_gpu(page, cwd: pathlib.Path) -> None:
    """Type "L40S" into the GPU field one key at a time, pausing on "L40": no error, no plan of
    an L4 or of "L40", a "keep typing" hint during the pause; the plan of the L40S after it."""
    field = page.locator("#ldf-planner-hardware")
    field.scroll_into_view_if_needed()
    field.tap() if page.viewport_size["width"] < 600 else field.click()
    page.keyboard.press("Control+A")
    page.evaluate(WATCH_JS)
    n = _runs(page)
    field.press_sequentially("L40", delay=90)
    page.wait_for_timeout(1200)     # a pause on an incomplete name: more than twice the page's own
    assert _runs(page) == n, "the page planned while a GPU name was half typed"
    hint = page.locator("#ldf-planner-hardware-wait")
    assert hint.is_visible() and "L40S" in hint.inner_text(), hint.inner_text()
    field.press_sequentially("S", delay=90)
    _settle(page, n)
    seen = page.evaluate("() => window.__ldfSeen")
    assert not [x for x in seen if x.startswith("error")], seen
    assert len([x for x in seen if x.startswith("runs")]) == 1, seen
    assert "--hardware L40S" in page.inner_text(".ldf-planner-command")
    assert hint.is_hidden()
    _check(page, cwd)


# The words the page itself writes around the command's values: the form (every field's hint and
# its "default" option), the bar's legend, the status line and the explain box's hints.
WORDS_JS = """() => [...document.querySelectorAll('.ldf-planner-form, .ldf-planner-bar, .ldf-planner-status, .ldf-planner-summary, .ldf-explain-form')]
  .map(e => e.textContent).join('\\n')"""


def _check_words(page, edition: str, tr) -> None:
    """Each field's help is the option's --help text in the edition's language (English: the
    parser's own), and the page's words join values with the edition's punctuation: Chinese
    "默认：1" and "（估计值）", never "默认: 1" or "(估计值)"."""
    opts = {o["dest"]: o for o in ldf_planner.cli_options()}
    xopts = {o["dest"]: o for o in ldf_planner.explain_options()}
    words = page.evaluate(WORDS_JS)
    for dest, sel in (("tp", "#ldf-planner-tp-hint"), ("non_torch_gib", "#ldf-planner-non_torch_gib-hint")):
        help_en = opts[dest]["help"]
        want = tr(f"`help_{dest}`: {help_en}").split("：", 1)[1] if edition != "en" else help_en
        hint = page.locator(sel).text_content()
        assert hint.endswith(" · " + want), (dest, hint, want)
    xhelp = xopts["hardware"]["help"]
    xwant = tr(f"`help_hardware`: {xhelp}").split("：", 1)[1] if edition != "en" else xhelp
    assert page.locator("#ldf-explain-hardware-hint").text_content() == xwant
    if edition == "en":
        assert "default: " in words and " (estimate)" in words, words[:400]
        return
    d, est = tr("`default`: default").split("：", 1)[1], tr("`estimate`: estimate").split("：", 1)[1]
    assert f"{d}：" in words and f"（{est}）" in words, words[:400]
    for bad in (f"{d}: ", f"({est})", f"{d} (", "): "):
        assert bad not in words, (bad, words[words.find(bad) - 80:words.find(bad) + 80])
    assert not re.search(r"[\u4e00-\u9fff]: |[\u4e00-\u9fff] \(", words), \
        re.search(r".{0,60}[\u4e00-\u9fff](: | \().{0,60}", words).group(0)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("edition", list(EDITIONS))
def test_planner_in_the_browser(browser, server, site, tmp_path, edition, width):
    llama = (DATA / "Llama-3.1-8B-Instruct" / "config.json").read_text(encoding="utf-8")
    for name in ("Llama-3.1-8B-Instruct", "Qwen2.5-7B-Instruct"):
        (tmp_path / name).mkdir()
        shutil.copy(DATA / name / "config.json", tmp_path / name / "config.json")
    broken = json.loads(llama)
    broken["hidden_size"] = -1
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text(json.dumps(broken, indent=2))
    rel = EDITIONS[edition] + PAGE
    tab = Tab(browser, server, width)
    phone = width < 600
    t_test = time.perf_counter()
    try:
        page = tab.page
        cpu0 = _browser_cpu_s()
        _GzipHandler.sent = 0
        page.goto(f"{server}/{rel}", wait_until="load", timeout=TIMEOUT_MS)
        # said before the download starts: its size (the page's own HTML, before any script)
        size_mb = ldf_planner.download_sizes(ROOT)["total"] / 1e6
        _wait_ready(page)
        d = page.evaluate("() => ({...document.querySelector('.ldf-planner').dataset})")
        cold_s = float(d["ldfReady"]) / 1e3
        cpu_s = _browser_cpu_s() - cpu0   # what the load costs the cores, whatever the neighbours do
        weight_mb = _GzipHandler.sent / 1e6
        assert int(d["ldfLoaded"]) > 0.9 * size_mb * 1e6, (d["ldfLoaded"], size_mb)   # the progress counted it
        html_text = (site / rel).read_text(encoding="utf-8")
        assert f"{size_mb:.1f}" in re.search(r'<p class="ldf-planner-status"[^>]*>([^<]*)<', html_text).group(1)
        _check(page, tmp_path)
        # the checks tests/test_browser.py gives every other page, on this visit (its first plan,
        # bar and chart drawn): math, images, layout at this width, figures, results seen whole
        check_page(page)
        wname = next(k for k, v in PAGE_WIDTHS.items() if v == width)
        seen = look(page, site, rel, wname)
        problems = layout_problems(seen["layout"], wname) + seen["figures"]
        if wname == "desktop":
            problems += [f"a result does not fit: {w}" for w in wide_results(seen["layout"])]
        assert not problems, f"{rel} at {width} px:\n  " + "\n  ".join(problems)
        # labels: the edition's own
        tr = _translations(edition)
        label = page.inner_text('label[for="ldf-planner-tp"] .ldf-planner-name')
        assert label == tr("`tp`: Tensor-parallel degree").split("：" if edition != "en" else ": ", 1)[1], label
        _check_words(page, edition, tr)
        if phone:   # the verdict stays in sight while the reader is at the form
            page.locator("#ldf-planner-batch").scroll_into_view_if_needed()
            box = page.locator(".ldf-planner-summary").bounding_box()
            assert box and box["y"] + box["height"] <= 844 + 1 and box["y"] > 844 - 200, box
            assert re.search(r"fits|不下|放得下|可容纳", page.inner_text(".ldf-planner-summary")), page.inner_text(".ldf-planner-summary")
        changes, python, waits, long0 = [], [], [], page.evaluate("() => performance.now()")
        # the settings issue 42 changes the numbers of (a sliding window, the memory outside
        # torch at TP 8, SGLang's pool): at both widths of both editions, so that they stay exact
        both = [
            ({"model": "Mistral-7B-v0.1", "hardware": "H100-SXM", "tp": "1", "weights": "", "kv": "",
              "batch": "8", "context": "32768", "prompt": ""}, None, None),
            ({"model": "Llama-3.1-70B", "hardware": "H100-SXM", "tp": "8", "batch": "16", "context": "8192"}, None, None),
            # SGLang's convention, set in the folded engine settings
            ({"model": "Llama-3-8B", "tp": "1", "mem_fraction_static": "0.88", "batch": "8"}, None, None),
        ]
        halves = ([
            ({"mem_fraction_static": "", "model": "Mixtral-8x7B", "hardware": "H200", "tp": "2", "weights": "fp8",
              "batch": "32", "context": "8192", "prompt": "2048"}, None, None),
            # a deployment that does not fit: the bar runs past the device by what the table says
            ({"model": "DeepSeek-V3", "hardware": "H200", "tp": "8", "kv": "fp8", "batch": "64", "context": "32768",
              "prompt": ""}, None, None),
            ({"paste": ("Llama-3.1-8B-Instruct", llama), "hardware": "A100-80GB-SXM", "tp": "1", "weights": "int4",
              "kv": "", "batch": "16", "context": "8192"}, None, None),
            ({"model": "Llama-3-8B", "drop": ("Llama-3.1-8B-Instruct", DATA / "Llama-3.1-8B-Instruct" / "config.json"),
              "hardware": "H200", "tp": "4", "weights": "fp8", "kv": "fp8", "batch": "128", "context": "4096"},
             None, None),
            ({"hardware": "H100-SXM", "tp": "3", "batch": "8"}, "argument --tp", "tp"),
            ({"tp": "1", "batch": "0"}, "argument --batch: 0 is not allowed", "batch"),
        ], [
            ({"mem_fraction_static": "", "batch": "8", "paste": ("broken", json.dumps(broken, indent=2))},
             "hidden_size=-1 is not allowed", "config"),
            # a GPU without a preset: the custom spec the README shows
            ({"model": "Llama-3-8B", "hardware": "name=RTX-3090,memory_gb=24,runtime_gib=23.58,bandwidth_gbs=936,"
              "bf16_tflops=71,nvlink=none", "tp": "1", "weights": "", "kv": "", "batch": "1", "context": "8192"},
             None, None),
            # a deployment preset (its runtime total from a log, no NVLink) and an MoE in INT4
            ({"model": "Qwen3-30B-A3B", "hardware": "RTX-4090", "weights": "int4", "batch": "4", "context": "4096"},
             None, None),
            ({"choose": ("Qwen2.5-7B-Instruct", DATA / "Qwen2.5-7B-Instruct" / "config.json"), "hardware": "B200",
              "tp": "2", "weights": "bf16", "json": True, "plot": "decode.svg"}, None, None),
            ({"json": False, "plot": "", "hardware": ""}, "the following arguments are required: --hardware", "hardware"),
        ])
        # The other inputs' numbers do not depend on the width: each width of an edition takes half
        # of them (each half starts from a full setting), so both editions see every input once and
        # both widths see presets, a real config.json and refusals.
        for settings, error, dest in both + halves[WIDTHS.index(width)]:
            d = _apply(page, settings)
            changes.append(float(d["ldfMs"]))
            python.append(float(d["ldfPyMs"]))
            waits.append(float(d["ldfWaitMs"]))
            if settings.get("plot"):   # on the command line only; the page draws the chart itself
                assert page.inner_text(".ldf-planner-command").endswith(f"--json --plot {settings['plot']}")
            _check(page, tmp_path, error, dest)
            lay = page.evaluate(PLANNER_LAYOUT_JS, phone)
            assert not lay["cut"] and not lay["small"], f"{rel} at {width} px, {settings}:\n  " + \
                "\n  ".join(lay["cut"] + lay["small"])
        # the command's own text, opened: wrapped at the column, never scrolled sideways
        _apply(page, {"model": "Llama-3.1-70B", "hardware": "H100-SXM", "tp": "8", "batch": "16", "context": "8192",
                      "mem_fraction_static": ""})
        page.locator(".ldf-planner-raw > summary").click()
        lay = page.evaluate(PLANNER_LAYOUT_JS, phone)
        assert not lay["cut"] and not lay["small"], "\n  ".join(lay["cut"] + lay["small"])
        _type_a_gpu(page, tmp_path)
        longs = [dur for t, dur in page.evaluate("() => window.__ldfLong") if t >= long0]
        if not phone:
            problems = _contrast_problems(page)
            assert not problems, "\n  ".join(problems)
        # the explain box below the planner, on this visit: the same worker, no second Pyodide
        explain_ms = _explain_in_the_browser(page, tmp_path, edition, width)
        FIGURES.append(f"{rel} at {width} px: explain (V1 success, SGLang, 4 refusals): "
                       f"{', '.join(f'{t:.0f}' for t, _, _ in explain_ms)} ms, of which the command's Python "
                       f"{', '.join(f'{p:.0f}' for _, p, _ in explain_ms)} ms")
        # the page's own share of each explanation (not the command's Python, not a wait for a
        # run begun before): as a plan's, < 200 ms
        assert max(t - p - w for t, p, w in explain_ms) < MAX_CHANGE_MS * _share(), explain_ms
        # the URL holds the settings: back to a good plan, then open the link (warm cache)
        d = _apply(page, {"model": "Qwen2.5-7B", "hardware": "H100-SXM", "tp": "1", "weights": "", "kv": "",
                          "context": "16384", "batch": "4"})
        assert d["ldfState"] == "ok", page.inner_text(".ldf-planner-error")
        changes.append(float(d["ldfMs"]))
        python.append(float(d["ldfPyMs"]))
        waits.append(float(d["ldfWaitMs"]))
        table, url = page.evaluate("() => document.querySelector('.ldf-planner-table').textContent"), page.url
        assert "context=16384" in url and "model=Qwen2.5-7B" in url, url
        page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
        _wait_ready(page)
        warm_s = float(page.evaluate("() => document.querySelector('.ldf-planner').dataset.ldfReady")) / 1e3
        page.wait_for_function("() => { const d = document.querySelector('.ldf-planner').dataset; return d.ldfChart === d.ldfRuns; }")
        assert page.evaluate("() => document.querySelector('.ldf-planner-table').textContent") == table
        _check(page, tmp_path)
        # reads at a phone's width: the page itself never scrolls sideways
        overflow = page.evaluate("w => document.scrollingElement.scrollWidth - w", width)
        assert overflow <= 1, f"the page scrolls sideways by {overflow} px at {width} px"
        if os.environ.get("LDF_SCREENSHOTS") == "1":   # full page: 1-3 CPU-s, on request as every page's
            (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
            for mode in ("light", "dark"):
                _theme(page, mode)
                page.screenshot(path=str(ARTIFACTS / "screenshots" / f"planner.{edition}.{width}.{mode}.png"), full_page=True)
        busy = _busy()
        FIGURES.append(f"{rel} at {width} px: {weight_mb:.2f} MB sent (gzip; {size_mb:.1f} MB said before the "
                       f"download), interactive {cold_s:.1f} s cold ({cpu_s:.1f} CPU-s of the browser's processes), "
                       f"{warm_s:.1f} s warm; changes {', '.join(f'{c:.0f}' for c in changes)} ms, of which the command's "
                       f"Python {', '.join(f'{p:.0f}' for p in python)} ms, waited for a run begun before "
                       f"{', '.join(f'{w:.0f}' for w in waits)} ms "
                       f"(median {statistics.median(changes):.0f}); longest main-thread task while changing "
                       f"{max(longs, default=0):.0f} ms; load average {os.getloadavg()[0]:.1f}"
                       f"{f' (busy: limits x {_share():.1f})' if busy else ''}; test {time.perf_counter() - t_test:.0f} s")
        assert not tab.external, f"requests to other hosts: {tab.external}"
        assert not tab.errors, f"console errors: {tab.errors}"
        assert weight_mb <= MAX_MB_GZIP, f"{weight_mb:.2f} MB transferred > {MAX_MB_GZIP} MB"
        k = _share()
        assert cold_s <= MAX_COLD_S * k, f"interactive after {cold_s:.1f} s cold (load {k:.1f} per core)"
        # a change: the command's Python (in the worker) and the page's own work, < 200 ms.  Not
        # counted, and reported: the wait for a run the worker began before the change (a run
        # cannot be cut short), and a plan whose Python alone takes longer (the core's first
        # plan of DeepSeek-V3 at a new layout walks its 45,000 tensors: about 1 s in CPython);
        # the page's own share must still be < 200 ms
        own = [c - w for c, w in zip(changes, waits)]
        slow = [(c, p) for c, p in zip(own, python) if c >= MAX_CHANGE_MS * k and p < MAX_CHANGE_MS * k]
        assert not slow, f"changes took {changes} ms, waited {waits}, Python {python} (load {k:.1f} per core)"
        assert max(c - p for c, p in zip(own, python)) < MAX_CHANGE_MS * k, (changes, waits, python)
        assert max(longs, default=0) < MAX_CHANGE_MS * k, f"main-thread tasks of {longs} ms while changing"
    finally:
        tab.close()


# --- the explain box (issue 43): `python -m llm_dataflow explain` on a pasted log, same worker ------
LOGS = DATA / "logs"
QWEN3_235B_FP8 = {   # Qwen3-235B-A22B-FP8's shapes (tests/test_explain.py builds the same ModelConfig)
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 94, "hidden_size": 4096,
    "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
    "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                                      "quant_method": "fp8", "weight_block_size": [128, 128]}}


def explain_cli(argv: list[str], cwd: pathlib.Path) -> tuple[int, str, str]:
    """``llm_dataflow.core.explain.main(argv)`` in ``cwd``: (exit status, stdout, stderr)."""
    from llm_dataflow.core.explain import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


def _xruns(page) -> int:
    return int(page.evaluate("() => +document.querySelector('.ldf-explain').dataset.ldfRuns || 0"))


def _xsettle(page) -> None:
    page.wait_for_function("() => !document.querySelector('.ldf-explain').dataset.ldfPending", timeout=TIMEOUT_MS)


def _explain(page, log: str, hardware: str, config=None) -> dict:
    """Paste ``log``, set the GPU and the model (``None``: the name in the log; a preset's name; or
    ``(folder, config.json text)`` pasted), press Explain; returns the box's dataset."""
    box = page.locator(".ldf-explain")
    box.scroll_into_view_if_needed()
    page.fill("#ldf-explain-source", log)
    page.fill("#ldf-explain-hardware", hardware)
    if config is None:
        page.select_option("#ldf-explain-config", value="")
    elif isinstance(config, str):
        page.select_option("#ldf-explain-config", value=config)
    else:
        page.select_option("#ldf-explain-config", value="@config")
        page.fill("#ldf-explain-folder", config[0])
        page.fill("#ldf-explain-configtext", config[1])
    _xsettle(page)
    n = _xruns(page)
    button = page.locator(".ldf-explain-go")
    button.tap() if page.viewport_size["width"] < 600 else button.click()
    page.wait_for_function("n => { const d = document.querySelector('.ldf-explain').dataset; return +d.ldfRuns > n && !d.ldfPending; }",
                           arg=n, timeout=TIMEOUT_MS)
    return page.evaluate("() => ({...document.querySelector('.ldf-explain').dataset})")


EXPLAIN_SHOWN_JS = """() => {
  const q = (s) => document.querySelector(s);
  const runs = [...document.querySelectorAll('.ldf-explain-run')].map(r => ({
    title: r.querySelector('.ldf-explain-title').textContent,
    settings: [...r.querySelectorAll('.ldf-explain-settings li')].map(e => e.textContent),
    rows: [...r.querySelectorAll('tr.ldf-explain-row')].map(t => [t.dataset.term, ...[...t.children].map(c => c.textContent)]),
    why: [...r.querySelectorAll('tr.ldf-explain-why')].map(t => t.textContent),
    error: (r.querySelector('.ldf-explain-error') || {textContent: null}).textContent,
    verdict: (r.querySelector('.ldf-explain-verdict') || {textContent: null}).textContent,
    changes: [...r.querySelectorAll('.ldf-explain-changes li')].map(e => [e.querySelector('code').textContent, e.textContent])}));
  return {runs, text: q('.ldf-explain-text').textContent, result: q('.ldf-explain-result').textContent,
          err: q('.ldf-explain-err').hidden ? null : q('.ldf-explain-err').textContent,
          outputs: !q('.ldf-explain-outputs').hidden}; }"""


def _label(tr, key: str, english: str) -> str:
    """The box's label ``key`` in the edition (``tr``: its catalog), as the page shows it."""
    msg = f"`{key}`: {english}"
    got = tr(msg)
    return got.split("：", 1)[1] if got != msg else english


def _explain_check(page, cwd: pathlib.Path, tr, expect_error: str | None = None, dest: str | None = None) -> dict:
    """The box's outputs equal ``explain`` run on the argv it shows, with the files it wrote."""
    words = shlex.split(page.inner_text(".ldf-explain-command"))
    assert words[:4] == ["python", "-m", "llm_dataflow", "explain"], words
    argv = words[3:]
    (cwd / argv[1]).write_text(page.input_value("#ldf-explain-source"), encoding="utf-8")
    if page.input_value("#ldf-explain-config") == "@config":
        folder = cwd / page.input_value("#ldf-explain-folder")
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(page.input_value("#ldf-explain-configtext"), encoding="utf-8")
    code, out, err = explain_cli(argv, cwd)
    s = page.evaluate(EXPLAIN_SHOWN_JS)
    assert "Traceback" not in page.inner_text(".ldf-explain")
    if expect_error is not None:
        assert code == 2, (argv, out)
        assert s["err"] == err.rstrip("\n") and expect_error in s["err"], (s["err"], err)
        assert not s["outputs"]
        if dest:
            assert page.get_attribute(f"#ldf-explain-{dest}", "aria-invalid") == "true", dest
        return s
    assert code == 0, err
    assert s["err"] is None and s["outputs"]
    assert s["text"] == out.rstrip("\n")
    jcode, jout, _ = explain_cli(argv + ["--json"], cwd)
    assert jcode == 0 and s["result"] == jout
    res = json.loads(jout)
    assert len(s["runs"]) == len(res)
    for shown, r in zip(s["runs"], res):
        p = r["printed"]
        assert shown["title"] == p["head"][0] and shown["settings"] == [h.strip() for h in p["head"][1:]]
        ok = {"yes": _label(tr, "yes", "yes"), "NO": _label(tr, "no", "NO"), "": ""}
        want = [[c["term"], _label(tr, f"term_{c['term']}", c["label"]), c["engine"], c["book"], c["diff"], ok[c["ok"]]]
                for c in p["cells"]]
        assert shown["rows"] == want, (shown["rows"], want)
        assert [w.split(" · ")[0] for w in shown["why"]] == [c["why"] for c in p["cells"]]
        assert shown["error"] == next((t for t in p["tail"] if t.startswith("error (")), None)
        assert shown["verdict"] == next(t for t in p["tail"] if t.startswith("book: "))
        assert [c[0] for c in shown["changes"]] == [c["flag"] for c in r["changes"]]
    return s


def _explain_in_the_browser(page, cwd: pathlib.Path, edition: str, width: int) -> list[float]:
    """The explain box on the planner's visit (one Pyodide start): its example (a vLLM failure),
    a vLLM V1 success, an SGLang start, and the bad inputs, each equal to the command; its layout
    at this width; its labels in this edition.  Returns each explanation's time (ms)."""
    tr = _translations(edition)
    phone = width < 600
    layout_js = PLANNER_LAYOUT_JS.replace("document.querySelector('.ldf-planner')", "document.querySelector('.ldf-explain')")
    label = page.inner_text('label[for="ldf-explain-source"] .ldf-planner-name')
    assert label == _label(tr, "source", "Command line or startup log"), label
    times = []
    # the example: vllm-project/vllm issue #10517, a refused --max-model-len on an RTX 3090
    n = _xruns(page)
    page.locator(".ldf-explain-example").click()
    page.wait_for_function("n => { const d = document.querySelector('.ldf-explain').dataset; return +d.ldfRuns > n && !d.ldfPending; }",
                           arg=n, timeout=TIMEOUT_MS)
    s = _explain_check(page, cwd, tr)
    assert len(s["runs"]) == 2 and s["runs"][1]["error"].startswith("error (line 11): The model's max seq len (29000)")
    assert [c[0] for c in s["runs"][1]["changes"]][:2] == ["--max-model-len 26003", "--gpu-memory-utilization 0.93"]
    page.locator(".ldf-explain-raw > summary").click()
    lay = page.evaluate(layout_js, phone)
    assert not lay["cut"] and not lay["small"], f"explain at {width} px:\n  " + "\n  ".join(lay["cut"] + lay["small"])
    page.locator(".ldf-explain-raw > summary").click()
    sglang = (LOGS / "vllm-issue-21348-qwen3-235b-a22b-fp8-4xh100.log").read_text(encoding="utf-8")
    cases = [
        # a vLLM V1 success (0.19.0, Gemma-2-9B-it on an H100; the preset's shapes)
        ((LOGS / "vllm-0.19-gemma-2-9b-it-h100-excerpt.log").read_text(encoding="utf-8"), "H100-SXM", "Gemma-2-9B",
         None, None),
        # an SGLang start: issue #21348's SGLang half, its config.json pasted
        (sglang[sglang.index("# SGLang"):], "H100-SXM", ("Qwen3-235B-A22B-FP8", json.dumps(QWEN3_235B_FP8, indent=1)),
         None, None),
        # bad inputs: each refused with the command's one line, the field outlined
        ("", "H100-SXM", "Llama-3-8B", "nothing to read", "source"),
        ("hello, world\n", "H100-SXM", "Llama-3-8B", "no vLLM or SGLang line", "source"),
        ((LOGS / "vllm-0.19-gemma-2-9b-it-h100-excerpt.log").read_text(encoding="utf-8"), "", "Gemma-2-9B",
         "a log does not name its GPU", "hardware"),
        ((LOGS / "vllm-0.19-gemma-2-9b-it-h100-excerpt.log").read_text(encoding="utf-8"), "H100-SXM",
         ("broken", '{"model_type": "llama", "hidden'), "not valid JSON", "configtext"),
    ]
    for log, hw, config, error, dest in cases:
        d = _explain(page, log, hw, config)
        times.append((float(d["ldfMs"]), float(d["ldfPyMs"]), float(d["ldfWaitMs"])))
        s = _explain_check(page, cwd, tr, error, dest)
        if error is None:
            lay = page.evaluate(layout_js, phone)
            assert not lay["cut"] and not lay["small"], f"explain at {width} px:\n  " + "\n  ".join(lay["cut"] + lay["small"])
            if config == "Gemma-2-9B":
                assert s["runs"][0]["title"].startswith("vLLM 0.19")
                assert all(r[5] for r in s["runs"][0]["rows"] if r[0] in ("weights", "kv_memory"))
            else:
                assert s["runs"][0]["title"].startswith("SGLang")
                assert [r[0] for r in s["runs"][0]["rows"]] == ["kv_pool", "max_total_num_tokens"]
    return times


def test_planner_without_python_says_so(browser, server):
    """Opened from disk (file://) and on a build without Pyodide, the page says why it cannot
    run the planner and shows the command for its settings; no console error."""
    for how in ("file", "no-pyodide"):
        base = SITE.resolve().as_uri() if how == "file" else server
        tab = Tab(browser, base, 1280, route=how == "file")
        try:
            if how == "no-pyodide":   # what ldf_planner writes when web/dist/_vendor/pyodide is absent
                def strip(route):
                    resp = route.fetch()
                    body = re.sub(r'"pyodide": "[^"]*"', '"pyodide": null', resp.text())
                    route.fulfill(response=resp, body=body, headers={k: v for k, v in resp.headers.items()
                                                                     if k.lower() not in ("content-encoding", "content-length")})
                tab.page.route(f"**/{PAGE}*", strip)
            tab.page.goto(f"{base}/{PAGE}?model=Llama-3-8B&hardware=H200&tp=2", wait_until="load")
            tab.page.wait_for_function("() => document.querySelector('.ldf-planner').dataset.ldfState === 'unavailable'",
                                       timeout=TIMEOUT_MS)
            status = tab.page.inner_text(".ldf-planner-status")
            assert ("http.server" in status) if how == "file" else ("Pyodide" in status), status
            assert tab.page.inner_text(".ldf-planner-command") == \
                "python -m llm_dataflow plan Llama-3-8B --hardware H200 --tp 2"
            assert not tab.errors and not tab.external, (how, tab.errors, tab.external)
        finally:
            tab.close()


def test_only_the_planner_loads_pyodide(site):
    """Pyodide and the planner's script are referenced by the planner page of each edition only."""
    seen = []
    for page in site.rglob("*.html"):
        rel = page.relative_to(site).as_posix()
        if rel.split("/")[0] in ("_static", "_vendor", "_sources", "_images", "_planner"):
            continue
        text = page.read_text(encoding="utf-8")
        if "_planner/planner.js" in text or "_vendor/pyodide" in text:
            seen.append(rel)
    assert sorted(seen) == sorted(f + PAGE for f in EDITIONS.values()), seen
    for f in EDITIONS.values():
        assert (site / f / "_vendor" / "pyodide" / "pyodide.asm.wasm").is_file()
        assert (site / f / "_planner" / ldf_planner.CORE_ZIP).is_file()


def teardown_module(module):
    if FIGURES:
        ARTIFACTS.mkdir(exist_ok=True)
        with open(ARTIFACTS / "planner.txt", "a", encoding="utf-8") as f:
            f.write(time.strftime("%Y-%m-%d %H:%M:%S") + "\n" + "\n".join(f"  {x}" for x in FIGURES) + "\n")
