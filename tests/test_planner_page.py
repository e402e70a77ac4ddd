"""The web planner ("Plan a deployment", ``book/planner.md``): the CLI's own code in the browser.

Without a browser (always run):

* the core zip the site serves holds ``llm_dataflow/__init__.py`` and ``llm_dataflow/core/`` only,
  imports without torch or numpy, and its ``main(argv)`` prints what the package's CLI prints;
* every option of the ``plan`` command has a label on the page, translated in the Chinese edition.

In headless Chromium, over a local server that gzips what it sends (as a web host does), for
both editions at 1280 and 390 px, one cold page load each, then several inputs on it: every
input in each edition, half of them at each width (``test_planner_in_the_browser``):

* each input's table, JSON, memory bar and decode chart equal ``plan`` run in Python on the argv
  the page shows as its command line: presets, tensor parallelism, a pasted and a chosen real
  ``config.json`` (``tests/data/``), ``--json``, and refusals (a layout, a count, a config field),
  each shown with the CLI's message naming the field and never a traceback;
* no console error, no request to another host, nothing wider than a 390 px screen;
* on the cold visit, once the first plan, bar and chart are drawn, the per-page checks
  ``tests/test_browser.py`` gives every other page (``tests/_browsers.py``: ``check_page``,
  ``layout_problems``, ``figure_problems``, and at 1280 px ``wide_results``): that file leaves
  this page out: each edition and width starts Pyodide in one test, not two;
* the page's weight (bytes transferred, gzip) <= 8 MB; interactive <= 20 s cold, each change
  answered in < 200 ms (on a machine busier than its cores, k runnable tasks per core, the limits
  widen k times: a process gets about 1/k of a core; the figures are reported as measured);
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
MAX_COLD_S = 20.0            # to interactive (the first result), 2 cores
MAX_CHANGE_MS = 200.0        # one change answered (table, bar or error)
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
    assert "llm_dataflow/__init__.py" in names and "llm_dataflow/core/plan.py" in names
    assert all(n in ("llm_dataflow/__init__.py", "llm_dataflow/data/published_measurements.csv")
               or n.startswith("llm_dataflow/core/") for n in names), names
    assert not any("__pycache__" in n for n in names)
    again = tmp_path / "again.zip"
    ldf_planner.write_core_zip(again)
    assert z.read_bytes() == again.read_bytes(), "the zip differs between two builds of the same sources"
    folder = tmp_path / "Llama-3.1-8B-Instruct"
    folder.mkdir()
    shutil.copy(DATA / "Llama-3.1-8B-Instruct" / "config.json", folder / "config.json")
    argv = ["plan", "Llama-3.1-8B-Instruct/config.json", "--hardware", "H100-SXM", "--batch", "4", "--context", "2048"]
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); from llm_dataflow.core.plan import main; "
            "r = main(json.loads(sys.argv[2])); "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'matplotlib')); "
            "assert not heavy, heavy")
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", code, str(z), json.dumps(argv)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    FIGURES.append(f"core zip: {z.stat().st_size:,} B; main(argv) from the zip in a fresh Python "
                   f"(start included): {time.perf_counter() - t:.2f} s")
    assert run.returncode == 0, run.stderr
    assert run.stdout == cli(argv, tmp_path)[1]


def test_every_cli_option_has_a_label_in_both_editions():
    from babel.messages.pofile import read_po

    text = (ROOT / "book" / "planner.md").read_text(encoding="utf-8")
    block = text.split("```{ldf-planner}", 1)[1].split("```", 1)[0]
    labels = dict(re.findall(r"^- `([^`]+)`: (.+)$", block, re.M))
    with open(ROOT / "locale" / "zh_CN" / "LC_MESSAGES" / "book" / "planner.po", "rb") as f:
        zh = {m.id: m.string for m in read_po(f) if m.id and m.string and not m.fuzzy}
    options = ldf_planner.cli_options()
    assert {o["dest"] for o in options} >= {"model", "hardware", "tp", "batch", "context", "prompt", "weights", "kv"}
    for o in options:
        assert o["dest"] in labels, f"CLI option {o['flag'] or o['dest']} has no label on the page"
        msg = f"`{o['dest']}`: {labels[o['dest']]}"
        assert re.search(r"[\u4e00-\u9fff]", zh.get(msg, "")) or o["dest"] == "hardware", \
            f"{msg!r} is not translated in locale/zh_CN/LC_MESSAGES/book/planner.po"
    for key in ldf_planner.PAGE_SKIPS:
        assert f"note_{key}" in labels


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
    are compressed already), a cache lifetime so that a second visit is warm."""

    cache: dict[str, bytes] = {}
    STORED = (".zip", ".png", ".jpg", ".woff2", ".woff", ".ico", ".gz")

    def log_message(self, *args):
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

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
        except (BrokenPipeError, ConnectionResetError):
            pass


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


class Tab:
    """One browser context (empty cache): console errors, requests to other hosts, bytes received."""

    def __init__(self, browser, base: str, width: int):
        phone = width < 600
        self.base = base
        self.context = browser.new_context(viewport={"width": width, "height": 844 if phone else 900},
                                           is_mobile=phone, has_touch=phone, device_scale_factor=1)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        self.bytes: dict[str, int] = {}
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("requestfinished", self._finished)
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if is_local(url, self.base):
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def _finished(self, request):
        try:
            size = request.sizes()["responseBodySize"]   # as transferred (encoded)
        except Exception:
            size = 0
        self.bytes[request.url] = max(self.bytes.get(request.url, 0), size)

    def close(self):
        self.context.close()


def _wait_ready(page):
    page.wait_for_function("""() => { const r = document.querySelector('.ldf-planner');
        return r && (r.dataset.ldfReady || ['failed', 'unavailable'].includes(r.dataset.ldfState)); }""",
                           timeout=TIMEOUT_MS)
    state = page.evaluate("() => document.querySelector('.ldf-planner').dataset.ldfState")
    assert state in ("ok", "error"), page.inner_text(".ldf-planner-status")


def _settle(page, before: int):
    """Wait for the change after run ``before`` and its chart; returns the page's dataset."""
    page.wait_for_function("n => +document.querySelector('.ldf-planner').dataset.ldfRuns > n", arg=before,
                           timeout=TIMEOUT_MS)
    page.wait_for_function("""() => { const d = document.querySelector('.ldf-planner').dataset;
        return d.ldfState === 'error' || d.ldfChart === d.ldfRuns; }""", timeout=TIMEOUT_MS)
    return page.evaluate("() => ({...document.querySelector('.ldf-planner').dataset})")


def _runs(page) -> int:
    return int(page.evaluate("() => +document.querySelector('.ldf-planner').dataset.ldfRuns || 0"))


def _set(page, dest: str, value):
    """Set one control as a reader does (select, type, tick); returns the run count before."""
    n = _runs(page)
    loc = page.locator(f"#ldf-planner-{dest}")
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
    assert page.inner_text(".ldf-planner-table") == out.rstrip("\n")
    json_argv = [a for a in page_argv if a != "--json"] + ["--json"]
    jcode, jout, _ = cli(json_argv, cwd)
    assert page.evaluate("() => document.querySelector('.ldf-planner-result').textContent") == jout
    r = json.loads(jout)
    bar = dict(page.eval_on_selector_all(".ldf-bar-legend li", "els => els.map(e => [e.dataset.key, +e.dataset.bytes])"))
    for key, field in (("weights", "weight_bytes_per_gpu"), ("kv", "kv_bytes_per_gpu"),
                       ("activations", "activation_bytes_per_gpu"), ("reserve", "reserve_bytes_per_gpu")):
        assert bar[key] == r[field], (key, bar[key], r[field])
    cap = r["runtime_memory_bytes"]
    used = sum(r[f] for f in ("weight_bytes_per_gpu", "kv_bytes_per_gpu", "activation_bytes_per_gpu", "reserve_bytes_per_gpu"))
    assert (bar.get("free", 0) == cap - used) if r["fits"] else (bar["over"] == used - cap)
    # the chart is drawn after the table, one run of the command per batch: wait for this
    # batch's point (seconds on a loaded machine), never a fixed sleep
    page.wait_for_function("([b, t]) => [...document.querySelectorAll('.ldf-planner-chart circle')]"
                           ".some(e => +e.dataset.batch === b && +e.dataset.s === t)",
                           arg=[r["batch"], r["decode_step_s"]], timeout=120_000)
    points = page.eval_on_selector_all(".ldf-planner-chart circle", "els => els.map(e => [+e.dataset.batch, +e.dataset.s, e.dataset.binds, e.dataset.fits])")
    by_batch = {b: (s, binds, fits) for b, s, binds, fits in points}
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
    try:
        page = tab.page
        cpu0 = _browser_cpu_s()
        page.goto(f"{server}/{rel}", wait_until="load", timeout=TIMEOUT_MS)
        _wait_ready(page)
        d = page.evaluate("() => ({...document.querySelector('.ldf-planner').dataset})")
        cold_s = float(d["ldfReady"]) / 1e3
        cpu_s = _browser_cpu_s() - cpu0   # what the load costs the cores, whatever the neighbours do
        weight_mb = sum(tab.bytes.values()) / 1e6
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
        label = page.inner_text('label[for="ldf-planner-tp"]')
        assert label.startswith(tr("`tp`: Tensor-parallel degree").split("：" if edition != "en" else ": ", 1)[1]), label
        changes = []
        cases = [
            ({"model": "Mixtral-8x7B", "hardware": "H200", "tp": "2", "weights": "fp8", "batch": "32",
              "context": "8192", "prompt": "2048"}, None, None),
            ({"model": "DeepSeek-V3", "hardware": "H200", "tp": "8", "kv": "fp8", "batch": "64", "context": "32768",
              "prompt": ""}, None, None),
            ({"paste": ("Llama-3.1-8B-Instruct", llama), "hardware": "A100-80GB-SXM", "tp": "1", "weights": "int4",
              "kv": "", "batch": "16", "context": "8192"}, None, None),
            ({"model": "Llama-3-8B", "drop": ("Llama-3.1-8B-Instruct", DATA / "Llama-3.1-8B-Instruct" / "config.json"),
              "hardware": "H200", "tp": "4", "weights": "fp8", "kv": "fp8", "batch": "128", "context": "4096"},
             None, None),
            # a deployment preset (its runtime total from a log, no NVLink) and an MoE in INT4
            ({"model": "Qwen3-30B-A3B", "hardware": "RTX-4090", "tp": "1", "weights": "int4", "kv": "", "batch": "4",
              "context": "4096"}, None, None),
            ({"choose": ("Qwen2.5-7B-Instruct", DATA / "Qwen2.5-7B-Instruct" / "config.json"), "hardware": "B200",
              "tp": "2", "weights": "bf16", "json": True, "plot": "decode.svg"}, None, None),
            # a GPU without a preset: the custom spec the README shows
            ({"model": "Llama-3-8B", "hardware": "name=RTX-3090,memory_gb=24,runtime_gib=23.58,bandwidth_gbs=936,"
              "bf16_tflops=71,nvlink=none", "tp": "1", "batch": "1", "context": "8192"}, None, None),
            ({"json": False, "plot": "", "tp": "3"}, "argument --tp", "tp"),
            ({"tp": "1", "batch": "0"}, "argument --batch: 0 is not allowed", "batch"),
            ({"batch": "8", "paste": ("broken", json.dumps(broken, indent=2))}, "hidden_size=-1 is not allowed", "config"),
        ]
        # The inputs' numbers do not depend on the width: each width of an edition takes half of
        # them (each half starts from a full setting), so both editions see every input once and
        # both widths see presets, a real config.json and refusals.
        half = len(cases) // 2
        for settings, error, dest in (cases[:half] if width == WIDTHS[0] else cases[half:]):
            d = _apply(page, settings)
            changes.append(float(d["ldfMs"]))
            if settings.get("plot"):   # on the command line only; the page draws the chart itself
                assert page.inner_text(".ldf-planner-command").endswith(f"--json --plot {settings['plot']}")
            _check(page, tmp_path, error, dest)
        # the URL holds the settings: back to a good plan, then open the link (warm cache)
        d = _apply(page, {"model": "Qwen2.5-7B", "hardware": "H100-SXM", "context": "16384", "batch": "4"})
        changes.append(float(d["ldfMs"]))
        table, url = page.inner_text(".ldf-planner-table"), page.url
        assert "context=16384" in url and "model=Qwen2.5-7B" in url, url
        t = time.perf_counter()
        page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
        _wait_ready(page)
        warm_s = float(page.evaluate("() => document.querySelector('.ldf-planner').dataset.ldfReady")) / 1e3
        page.wait_for_function("() => { const d = document.querySelector('.ldf-planner').dataset; return d.ldfChart === d.ldfRuns; }")
        assert page.inner_text(".ldf-planner-table") == table
        _check(page, tmp_path)
        # reads at a phone's width: the page itself never scrolls sideways
        overflow = page.evaluate("w => document.scrollingElement.scrollWidth - w", width)
        assert overflow <= 1, f"the page scrolls sideways by {overflow} px at {width} px"
        if os.environ.get("LDF_SCREENSHOTS") == "1":   # full page: 1-3 CPU-s, on request as every page's
            (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "screenshots" / f"planner.{edition}.{width}.png"), full_page=True)
        busy = _busy()
        FIGURES.append(f"{rel} at {width} px: {weight_mb:.2f} MB transferred (gzip), interactive {cold_s:.1f} s cold "
                       f"({cpu_s:.1f} CPU-s of the browser's processes), "
                       f"{warm_s:.1f} s warm; changes {', '.join(f'{c:.0f}' for c in changes)} ms "
                       f"(median {statistics.median(changes):.0f}); load average {os.getloadavg()[0]:.1f}"
                       f"{f' (busy: limits x {_share():.1f})' if busy else ''}")
        assert not tab.external, f"requests to other hosts: {tab.external}"
        assert not tab.errors, f"console errors: {tab.errors}"
        assert weight_mb <= MAX_MB_GZIP, f"{weight_mb:.2f} MB transferred > {MAX_MB_GZIP} MB"
        k = _share()
        assert cold_s <= MAX_COLD_S * k, f"interactive after {cold_s:.1f} s cold (load {k:.1f} per core)"
        assert max(changes) < MAX_CHANGE_MS * k, f"changes took {changes} ms (load {k:.1f} per core)"
    finally:
        tab.close()


def test_planner_without_python_says_so(browser, server):
    """Opened from disk (file://) and on a build without Pyodide, the page says why it cannot
    run the planner and shows the command for its settings; no console error."""
    for how in ("file", "no-pyodide"):
        base = SITE.resolve().as_uri() if how == "file" else server
        tab = Tab(browser, base, 1280)
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
