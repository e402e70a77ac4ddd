"""The chapters as a student meets them in JupyterLab (a real server, headless Chromium).

One JupyterLab per pytest worker is started on 127.0.0.1 (a free port, a token) over a temporary
copy of ``notebooks/``, with temporary Jupyter config/data/runtime/settings/workspace directories
and the settings ``make lab`` writes (``tools/lab_settings.py``: widget state saved with the
notebook, nbgrader's UI off for the chapters, no news prompt); it is stopped at the end.  For every
chapter:

1. **First open** (the notebook as committed, not trusted, not run): it is not marked modified;
   MyST renders (``jupyterlab-myst``): solution dropdowns are folded ``<details>``, no raw
   ``:::{dropdown}``, ``{cite}`` or ``{term}`` text; every calculator shows its static table (the
   sanitised ``text/html`` of ``llm_dataflow.live``); no saved progress bar shows "0%"; no
   nbgrader "Validate" button.
2. **Run in JupyterLab** what only JupyterLab can check: every calculator cell (in a reader's
   kernel a calculator computes lazily, a path nbval's ``LDF_STATIC_VIEWS`` kernel does not take)
   and, in ``LDF_LAB_PROGRESS`` chapters (default ``06``: every chapter's bars are one function,
   ``ldf.progress``, and chapter 05's needs 13 of its cells, 40 s), every cell with an
   ``ldf.progress`` bar (drawn as a widget here, as text under nbval), each
   with the cells it needs (``lab_cells``: the earlier cells that define a name it uses, read with
   ``symtable``, and the set-up cell), in order, in one kernel: none shows an error or a warning, and a
   progress bar ends as "<what>: <n> steps".  That every cell of every chapter runs, top to bottom,
   and prints what was saved is strict nbval's check (``pytest notebooks/``), not repeated here;
   ``LDF_LAB_RUN=all`` makes this step a full *Run All* again.
3. **A calculator responds**: its first slider (or dropdown) moves and its table changes.
4. **Save, shut the kernel down, reopen** (the next day, a fresh kernel): no "Error displaying
   widget", the calculator shows the setting it was saved at (the save kept the widget state).
   In ``LDF_LAB_RERUN`` chapters (default ``02``; ``all`` for every one) the same cells run
   again after reopening and the calculator responds again.

Screenshots of each step go to ``artifacts/jupyterlab/`` (not committed).

One server and one browser tab serve the even chapters on one pytest-xdist worker, another
the odd ones (``conftest.py``'s groups; a chapter's two tests stay on one worker). The tab loads JupyterLab once and opens each chapter in it with the
application's own ``docmanager:open`` (``LabTab``). Steps 1-3 and the save are
``test_chapter_in_jupyterlab``, run for every chapter first; ``test_chapter_reopened_next_day``
then loads JupyterLab afresh once (every chapter was saved in the application loaded before)
and reopens each chapter in it. Runtime, measured under ``make test`` on 2 cores: 16-51 s per
chapter's first day, 5-18 s per reopen (``pytest -s`` prints each step's seconds).
``LDF_LAB_CHAPTERS=00,05`` limits the chapters; ``LDF_LAB_NOTEBOOKS=DIR`` tests the notebooks of
another folder (e.g. executed copies) instead of ``notebooks/``.  Needs the ``playwright`` Python package and
Debian's ``chromium`` (``LDF_CHROMIUM`` overrides the path; never ``playwright install``);
skipped without them unless ``LDF_REQUIRE_SITE`` is set (CI), in which case that fails.
"""
from __future__ import annotations

import builtins
import importlib.util
import json
import os
import pathlib
import re
import secrets
import shutil
import symtable
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from _browsers import chromium, require

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHOTS = ROOT / "artifacts" / "jupyterlab"      # screenshots (gitignored): first open, after run, reopened
RUN_TIMEOUT_S = 180          # one chapter's cells (a whole chapter runs in < 60 s on 2 cores)
# what JupyterLab would show if MyST were not rendered
RAW_MYST = re.compile(r":::\s*\{|```\s*\{|\{cite(:[a-z]+)?\}`|\{term\}`|\{numref\}`|\{ref\}`")


_require = require      # skip, or fail under LDF_REQUIRE_SITE (tests/_browsers.py)
_chromium = chromium


SOURCE = pathlib.Path(os.environ.get("LDF_LAB_NOTEBOOKS", ROOT / "notebooks"))


def _chapters() -> list[str]:
    names = sorted(p.name for p in SOURCE.glob("[0-9][0-9]_*.ipynb"))
    only = [c.strip() for c in os.environ.get("LDF_LAB_CHAPTERS", "").split(",") if c.strip()]
    return [n for n in names if not only or n[:2] in only]


def _chosen(name: str, var: str, default: str) -> bool:
    """Whether chapter ``name`` is among the chapters the environment variable ``var`` lists
    (``"02,06"``, ``"all"``; ``default`` when unset)."""
    want = os.environ.get(var, default)
    return want == "all" or name[:2] in [c.strip() for c in want.split(",")]


def _rerun(name: str) -> bool:
    return _chosen(name, "LDF_LAB_RERUN", "02")


def _code_names(src: str) -> tuple[set[str], set[str]]:
    """(names a code cell defines, names it reads from the notebook's namespace) — IPython's
    %magics and !shell lines skipped. ``symtable`` keeps the scopes apart: a comprehension's
    ``for t in ...`` or a lambda's argument is local to it, not a read of an earlier cell's ``t``
    (which would pull that cell, and what it needs, into the run)."""
    text = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
    top = symtable.symtable(text, "<cell>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    stack = list(top.get_children())
    while stack:                      # names nested scopes read from the module's namespace
        t = stack.pop()
        stack.extend(t.get_children())
        used |= {s.get_name() for s in t.get_symbols()
                 if s.is_referenced() and s.is_global() and not s.is_declared_global()}
        defined |= {s.get_name() for s in t.get_symbols() if s.is_declared_global() and s.is_assigned()}
    return defined, used - set(dir(builtins))


def _is_calculator(cell: dict) -> bool:
    return any("ldf-calc-card" in "".join(o.get("data", {}).get("text/html", ""))
               for o in cell.get("outputs", []))


def lab_cells(nb: dict, progress: bool = True) -> list[int]:
    """Indices (into ``nb["cells"]``) of the code cells step 2 runs: every calculator cell and,
    with ``progress``, every cell that draws an ``ldf.progress`` bar, the set-up cell, and each
    earlier cell that defines a name one of those reads (transitively); the hosted-install cell
    (``remove-cell``) never runs in a kernel that has the package. ``LDF_LAB_RUN=all``: every
    code cell."""
    code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and "remove-cell" not in c.get("metadata", {}).get("tags", [])]
    if os.environ.get("LDF_LAB_RUN") == "all":
        return code
    names = {i: _code_names("".join(nb["cells"][i]["source"])) for i in code}
    targets = {i for i in code if _is_calculator(nb["cells"][i])
               or (progress and "ldf.progress(" in "".join(nb["cells"][i]["source"]))}
    need = targets | set(code[:1])            # the set-up cell: import, seed, device
    wanted = set().union(*(names[i][1] for i in need))
    for i in reversed([i for i in code if i < max(need)]):
        if i not in need and names[i][0] & wanted:
            need.add(i)
            wanted |= names[i][1]
    return sorted(need)


def _lab_settings():
    spec = importlib.util.spec_from_file_location("lab_settings", ROOT / "tools" / "lab_settings.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server over a temporary copy of the chapters."""

    def __init__(self, tmp: pathlib.Path):
        self.root = tmp / "notebooks"
        shutil.copytree(SOURCE, self.root,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("LDF_STATIC_VIEWS", "JPY_SESSION_NAME", "JUPYTER_CONFIG_PATH")}
        for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")]:
            (tmp / sub).mkdir()
            env[var] = str(tmp / sub)
        app_settings, chapters = tmp / "app-settings", tmp / "chapters-config"
        _lab_settings().write(app_settings, chapters)     # what `make lab` writes
        # the test only: every cell in the DOM (no windowing), so nothing needs scrolling to exist
        (app_settings / "overrides.d" / "zz-test.json").write_text(json.dumps(
            {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}))
        env["JUPYTER_CONFIG_PATH"] = str(chapters)
        env["LDF_DEVICE"] = "cpu"
        self.token = secrets.token_hex(16)
        self.log_path = tmp / "server.log"
        # A port found free can be taken by another pytest worker's server before this one binds
        # it (port_retries=0 then exits at once): start again on a new port, three times at most.
        for attempt in range(3):
            self.port = _free_port()
            self.base = f"http://127.0.0.1:{self.port}"
            cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                   f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                   f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                   f"--LabApp.app_settings_dir={app_settings}",
                   # window.jupyterapp: the test opens each chapter in one loaded JupyterLab
                   # (its commands), instead of loading the whole application twice per chapter
                   "--LabApp.expose_app_in_browser=True"]
            if hasattr(os, "getuid") and os.getuid() == 0:
                cmd.append("--allow-root")
            self._log = open(self.log_path, "w")
            self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                         cwd=self.root)
            if self._wait_started(deadline=time.monotonic() + 90):
                return
            self._log.close()
        raise RuntimeError("JupyterLab did not start:\n" + self.log_path.read_text()[-3000:])

    def _wait_started(self, deadline: float) -> bool:
        """True once the server answers; False if it exits first (e.g. its port was taken)."""
        while True:
            try:
                self.api("status")
                return True
            except Exception:
                if self.proc.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + self.log_path.read_text()[-3000:])
                time.sleep(0.25)

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shut_down_kernel(self, name: str) -> None:
        """End the notebook's session and kernel (as a server restart the next day would)."""
        for s in self.api("sessions"):
            if s["path"].endswith(name):
                self.api(f"sessions/{s['id']}", method="DELETE")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    pytest.importorskip("jupyterlab")
    server = Lab(tmp_path_factory.mktemp("jupyterlab"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(chromium_browser):
    return chromium_browser     # conftest.py: one Chromium per test process


@pytest.fixture(scope="module")
def tab(lab, browser):
    t = LabTab(lab, browser)
    yield t
    t.close()


# --- helpers on a notebook page --------------------------------------------------------------

class LabTab:
    """One browser page holding one loaded JupyterLab for a whole test process: each chapter is
    opened with the application's own command (``docmanager:open``) and closed afterwards, so
    the application's bundles load and start once, not twice per chapter. A page that has
    crashed or lost the application is loaded again."""

    def __init__(self, lab: Lab, browser):
        self.lab, self.browser, self.page = lab, browser, None
        self.loads = 0          # how many times the application has been loaded in this tab

    def _load(self) -> None:
        if self.page is not None and not self.page.is_closed():
            self.page.close()
        page = self.browser.new_page(viewport={"width": 1400, "height": 1000})
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        # ?reset: a fresh workspace (no tabs restored from an earlier session)
        page.goto(f"{self.lab.base}/lab?reset&token={self.lab.token}", timeout=60_000)
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
        page.evaluate("() => window.jupyterapp.restored.then(() => true)")
        self.page = page
        self.loads += 1

    def open(self, name: str, reload: bool = False, settle: bool = True):
        """Open notebook ``name`` (read from disk) as the only document; wait until its kernel
        is idle and every markdown cell is rendered by jupyterlab-myst. ``reload``: load the
        application afresh first, as a reader coming back the next day does. ``settle``: wait
        for the late metadata writes (``_settled``; a test of the modified mark needs them landed)."""
        if (reload or self.page is None or self.page.is_closed()
                or not self.page.evaluate("() => !!window.jupyterapp")):
            self._load()
        page = self.page
        self.close_all()
        page.errors.clear()
        page.evaluate("name => window.jupyterapp.commands.execute('docmanager:open', {path: name}).then(() => true)",
                      name)    # (the command's result, a widget, cannot be sent back)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        _wait_idle(page, 60)
        # jupyterlab-myst renders each markdown cell into a ".myst" element (asynchronously)
        page.wait_for_function("""() => {
            const md = document.querySelectorAll('.jp-MarkdownCell').length;
            return md > 0 && document.querySelectorAll('.jp-MarkdownCell .myst').length >= md; }""",
            timeout=60_000)
        if settle:
            _settled(page)
        return page

    def close_all(self) -> None:
        """Close every document without asking (a failed test may leave one modified)."""
        if self.page is None or self.page.is_closed():
            return
        # a dialog a failed step left open would block every later chapter's clicks
        for _ in range(self.page.locator(".jp-Dialog").count()):
            self.page.locator(".jp-Dialog .jp-mod-reject").first.click()
        self.page.evaluate("""async () => {
            for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
                if (w.context) { w.context.model.dirty = false; } }
            await window.jupyterapp.commands.execute('application:close-all');
            return true; }""")
        self.page.wait_for_function("() => !document.querySelector('.jp-Notebook')", timeout=10_000)

    def close(self) -> None:
        if self.page is not None and not self.page.is_closed():
            self.page.close()


def _settled(page) -> None:
    """What JupyterLab writes into a notebook it has just opened has landed: the session is ready
    and the kernel's info is in (it sets the kernelspec and language_info metadata), and 0.25 s
    more for the handlers that info runs. (A fixed 1.5 s before; this waits on the condition.)"""
    page.evaluate("""async () => {
        const panel = window.jupyterapp.shell.currentWidget;
        if (panel && panel.sessionContext) {
            await panel.sessionContext.ready;
            const k = panel.sessionContext.session && panel.sessionContext.session.kernel;
            if (k) { await k.info; }
        }
        await new Promise(r => setTimeout(r, 250));
        return true; }""")


def _wait_idle(page, timeout_s: float) -> None:
    """Kernel idle, no cell queued or running, for half a second in a row (queued cells show
    ``[*]``, so a run in progress is never idle between its cells)."""
    page.evaluate("() => { window.__ldfIdleSince = 0; }")
    page.wait_for_function("""() => {
        const st = document.querySelector('.jp-Notebook-ExecutionIndicator');
        const busy = Array.from(document.querySelectorAll('.jp-InputPrompt'))
            .some(p => p.textContent.includes('[*]'));
        const idle = st && st.getAttribute('data-status') === 'idle' && !busy;
        if (!idle) { window.__ldfIdleSince = 0; return false; }
        window.__ldfIdleSince = window.__ldfIdleSince || Date.now();
        return Date.now() - window.__ldfIdleSince > 500;
    }""", timeout=timeout_s * 1000, polling=250)


def _dirty(page) -> bool:
    return page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


def _menu(page, menu: str, item: str) -> None:
    page.locator(f"li.lm-MenuBar-item:has-text('{menu}')").first.click()
    page.locator(f".lm-Menu-item:has-text('{item}')").first.click()


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(".jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.innerText.trim())")


def _run_cells(page, cells: list[int]) -> float:
    """Run the notebook cells ``cells`` (indices into the notebook's cells), in order, in the
    open notebook's kernel: each is selected and run in place (Ctrl+Enter), queued one after the
    other as a reader would; returns the seconds until the kernel is idle again."""
    t0 = time.perf_counter()
    before = _prompts(page)
    all_cells = page.locator(".jp-Notebook .jp-Cell")
    for i in cells:
        prompt = all_cells.nth(i).locator(".jp-InputArea-prompt").first
        prompt.scroll_into_view_if_needed()
        prompt.click()
        page.keyboard.press("Control+Enter")
    # started: a cell is queued or running, or a cell has a new execution count
    page.wait_for_function("""before => {
        const now = Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))
            .map(e => e.innerText.trim());
        return now.some((p, i) => p.includes('*') || p !== before[i]);
    }""", arg=before, timeout=30_000, polling=100)
    _wait_idle(page, RUN_TIMEOUT_S)
    return time.perf_counter() - t0


def _trust(page) -> None:
    """Trust the notebook (the palette's *Trust Notebook*, then the dialog's *Trust*), as a reader
    who ran only some cells does before saving: JupyterLab signs a saved notebook as trusted only
    when every output came from this session, and restores saved widget state only in a trusted
    notebook. A *Run All* (``LDF_LAB_RUN=all``) signs it without this."""
    page.keyboard.press("Control+Shift+C")
    box = page.locator(".lm-CommandPalette-input").first
    box.wait_for(timeout=10_000)
    box.fill("Trust Notebook")
    page.locator(".lm-CommandPalette-item:has-text('Trust Notebook')").first.click()
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    accept.wait_for(timeout=10_000)
    accept.click()
    accept.wait_for(state="detached", timeout=10_000)


def _saved_notebook(lab: Lab, name: str, before: str, page=None, timeout_s: float = 30) -> dict:
    """The notebook as the save wrote it. The tab's dirty mark can clear before the save request
    starts, and jupyter_server writes the file in place (``atomic_writing`` keeps a backup, not a
    rename), so a read at once can find it empty or half written: wait until the server reports a
    newer modification time and the file parses.

    JupyterLab also saves a notebook when it is trusted. A Ctrl+S right after may join that save
    (one write: ``before`` is read before trusting), write again (the file is read once its time
    has held for a second), or, when its check runs while that save's answer is on its way, find
    the file newer than the application knows and ask "File Changed" (each seen in full runs on
    a loaded machine). The version open here is the reader's: the test answers *Overwrite*, as
    the reader would."""
    deadline = time.monotonic() + timeout_s
    seen = None                           # a newer time, and when it was first seen
    while True:
        if page is not None and page.locator(".jp-Dialog:has-text('File Changed') .jp-mod-accept").count():
            page.locator(".jp-Dialog:has-text('File Changed') .jp-mod-accept").first.click()
        now = lab.api(f"contents/{name}?content=0")["last_modified"]
        if now != before:
            # the trust's save and the Ctrl+S may be two writes: read once the time has held
            # for a second with nothing left to save
            if seen is None or seen[0] != now:
                seen = (now, time.monotonic())
            elif time.monotonic() - seen[1] >= 1.0 and (page is None or not _dirty(page)):
                try:
                    return json.loads((lab.root / name).read_text(encoding="utf-8"))
                except json.JSONDecodeError:
                    pass                  # still being written
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: the save did not finish within {timeout_s} s")
        time.sleep(0.1)


def _code_prompts(page, cells: list[int]) -> list[str]:
    """The input prompts of the notebook cells ``cells`` ("[3]:" once run)."""
    return page.evaluate("""idx => { const all = document.querySelectorAll('.jp-Notebook .jp-Cell');
        return idx.map(i => { const p = all[i].querySelector('.jp-InputPrompt');
                              return p ? p.innerText.trim() : ''; }); }""", cells)


def _outputs_text(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.innerText)")


def _calculator(page, timeout_ms: int = 30_000):
    """The first live calculator: a widget box holding controls and an HTML table."""
    box = page.locator(".jp-OutputArea-output .widget-vbox:has(.widget-html-content table)").first
    box.wait_for(timeout=timeout_ms)
    return box


def _table_text(box) -> str:
    return box.locator(".widget-html-content").last.inner_text()


def _move(page, box) -> str:
    """Move the calculator's first slider one step right (else pick another dropdown value);
    returns the control's new shown value."""
    sliders = box.locator(".widget-hslider")
    if sliders.count():
        handle = sliders.first.locator(".noUi-handle").first
        readout = sliders.first.locator(".widget-readout")
        initial = readout.inner_text()
        handle.scroll_into_view_if_needed()
        handle.focus()
        shown = readout.element_handle()
        for key in ("End", "Home"):         # the largest value, or the smallest if it starts there
            page.keyboard.press(key)
            try:
                page.wait_for_function("([el, t]) => el.innerText !== t", arg=[shown, initial], timeout=2_000)
                break
            except Exception:
                continue
        assert readout.inner_text() != initial, "the slider did not move"
        return readout.inner_text()
    select = box.locator(".widget-dropdown select").first
    options = select.locator("option").all_inner_texts()
    select.select_option(label=options[-1] if select.input_value() != options[-1] else options[0])
    return select.evaluate("s => s.options[s.selectedIndex].text")


def _shot(page, name: str, step: str, box=None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    target = box if box is not None else page.locator(".jp-OutputArea-output .ldf-calc-card").first
    if target.count():
        target.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / f"{name[:-6]}.{step}.png"))


def _calculator_outputs(nb: dict) -> int:
    return sum(1 for c in nb["cells"] for o in c.get("outputs", [])
               if "ldf-calc-card" in "".join(o.get("data", {}).get("text/html", "")))


# --- the test --------------------------------------------------------------------------------

class _Laps:
    """Seconds per step of one chapter's test, printed (``pytest -s``, or with a failure's
    captured output) so that a slow step shows where it is."""

    def __init__(self, name: str):
        self.name, self.t, self.laps = name, time.perf_counter(), []

    def __call__(self, what: str) -> None:
        now = time.perf_counter()
        self.laps.append(f"{what} {now - self.t:.1f} s")
        self.t = now

    def report(self) -> None:
        print(f"{self.name}: " + ", ".join(self.laps))


#: what each chapter's first day left for the next day's test: {name: {...}}
_FIRST_DAY: dict[str, dict] = {}


def _first_day(lab, tab, name) -> dict:
    """Steps 1-3 and the save of step 4 (see the module's docstring); returns what the next
    day's reopen checks against, and the application load that saved it."""
    nb = json.loads((lab.root / name).read_text(encoding="utf-8"))
    n_calc = _calculator_outputs(nb)
    markdown = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    n_dropdowns = len(re.findall(r"\{dropdown\}", markdown))
    run = lab_cells(nb, progress=_chosen(name, "LDF_LAB_PROGRESS", "06"))
    laps = _Laps(name)

    # 1. first open: as committed, untrusted, not run
    page = tab.open(name)
    try:
        assert not _dirty(page), f"{name} opens marked modified"
        assert page.locator(".validate-button").count() == 0, "nbgrader's Validate button on a chapter"
        md = "\n".join(_outputs_text(page, ".jp-MarkdownCell .jp-RenderedMarkdown, .jp-MarkdownCell .myst"))
        raw = sorted(set(m.group(0) for m in RAW_MYST.finditer(md)))
        assert not raw, f"{name}: MyST shown raw in JupyterLab: {raw}"
        if n_dropdowns:
            opened = page.eval_on_selector_all(".jp-MarkdownCell details", "els => els.map(d => d.open)")
            assert len(opened) >= n_dropdowns and not any(opened), \
                f"{name}: {n_dropdowns} dropdowns in the source, rendered open/closed: {opened}"
        tables = page.locator(".jp-OutputArea-output .ldf-calc-table")
        assert tables.count() == n_calc, f"{name}: {tables.count()} static calculator tables, {n_calc} calculators"
        if n_calc:
            tables.first.scroll_into_view_if_needed()
            assert tables.first.is_visible() and tables.first.locator("td").count() >= 4
        outs = "\n".join(_outputs_text(page, ".jp-OutputArea-output"))
        assert not re.search(r"\d+%\|", outs), f"{name}: a saved progress bar shows a frozen percentage"
        _shot(page, name, "1-first-open")
        laps("open")

        # 2. run the calculator and progress-bar cells, with the cells they need
        _run_cells(page, run)
        laps(f"run {len(run)} cells")
        # JupyterLab shows an exception, and any warning, as a stderr output
        errors = _outputs_text(page, ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert not errors, f"{name}: errors or warnings after the run: {[e[-600:] for e in errors]}"
        prompts = _code_prompts(page, run)
        unrun = [i for i, p in zip(run, prompts) if not re.fullmatch(r"\[\d+\]:", p)]
        assert not unrun, f"{name}: the run stopped: cells {unrun} not run (prompts {prompts})"
        outs = "\n".join(_outputs_text(page, ".jp-OutputArea-output"))
        assert not re.search(r"\d+%\|", outs), f"{name}: a progress bar stayed at a percentage after the run"
        assert "Error displaying widget" not in outs

        # 3. a calculator responds
        moved = table_after = None
        if n_calc:
            box = _calculator(page)
            before = _table_text(box)
            moved = _move(page, box)
            page.wait_for_function("([el, t]) => el.innerText !== t",
                                   arg=[box.locator(".widget-html-content").last.element_handle(), before],
                                   timeout=10_000)
            table_after = _table_text(box)
            _shot(page, name, "2-run", box)

        # 4. save, kernel gone (next day), reopen
        # read before trusting: JupyterLab saves a notebook it trusts, and a Ctrl+S while that save
        # is on its way may join it rather than write again
        before_save = lab.api(f"contents/{name}?content=0")["last_modified"]
        if os.environ.get("LDF_LAB_RUN") != "all":
            _trust(page)
        page.keyboard.press("Control+s")
        page.wait_for_function("() => !document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')"
                               " || !!document.querySelector('.jp-Dialog')", timeout=30_000)
        saved = _saved_notebook(lab, name, before_save, page)
        laps("move, trust, save")
        assert not page.errors, page.errors
    finally:
        tab.close_all()
    if n_calc:
        state = saved["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
        assert state.get("state"), f"{name}: the save kept no widget state"
    lab.shut_down_kernel(name)
    laps.report()
    return {"run": run, "n_calc": n_calc, "moved": moved, "table_after": table_after, "load": tab.loads}


@pytest.mark.parametrize("name", _chapters())
def test_chapter_in_jupyterlab(lab, tab, name):
    """The first day: steps 1-3, then save (step 4's first half)."""
    _FIRST_DAY.pop(name, None)
    _FIRST_DAY[name] = _first_day(lab, tab, name)


@pytest.mark.parametrize("name", _chapters())
def test_chapter_reopened_next_day(lab, tab, name):
    """The next day (step 4's second half): the kernel is gone and JupyterLab is loaded afresh
    after the save: once for all chapters saved in the application now loaded (the save of each
    chapter happened in that load, run first by ``test_chapter_in_jupyterlab``; run alone, this
    test does the first day itself)."""
    first = _FIRST_DAY.get(name) or _first_day(lab, tab, name)
    run, n_calc, moved, table_after = first["run"], first["n_calc"], first["moved"], first["table_after"]
    laps = _Laps(name)
    # loaded after the save; a chapter with a calculator waits for its widgets to render instead
    # of settling
    page = tab.open(name, reload=tab.loads <= first["load"], settle=not n_calc)
    laps("reopen")
    try:
        box = None
        if n_calc:
            try:
                box = _calculator(page, timeout_ms=20_000)
            except Exception:
                # Seen once in a full run on a loaded machine (not reproduced alone). A likely
                # cause: jupyterlab_widgets 3.0's restoreWidgets asks the new kernel for its
                # widgets first and reads the notebook's saved state only if that succeeds,
                # swallowing the error, so no saved widget is drawn. The reader's remedy is a
                # reload. One reload, said aloud: a state the save did not keep fails both times.
                outs = "\n".join(_outputs_text(page, ".jp-OutputArea-output"))
                print(f"{name}: no calculator drawn 20 s after reopening "
                      f"({'Error displaying widget' in outs and 'an error' or 'no error'} shown); reloading once")
                tab.close_all()
                lab.shut_down_kernel(name)
                page = tab.open(name, reload=True, settle=False)
                box = _calculator(page)
        outs = "\n".join(_outputs_text(page, ".jp-OutputArea-output"))
        assert "Error displaying widget" not in outs, f"{name}: a widget lost its state on reopen"
        assert not re.search(r"\d+%\|", outs)
        if n_calc:
            assert _table_text(box) == table_after, f"{name}: the reopened calculator lost its setting"
            if box.locator(".widget-hslider").count():
                assert box.locator(".widget-hslider .widget-readout").first.inner_text() == moved
            _shot(page, name, "3-reopened", box)
            if _rerun(name):      # the student runs the notebook again: it still responds
                _run_cells(page, run)
                box = _calculator(page)
                before = _table_text(box)
                _move(page, box)
                page.wait_for_function("([el, t]) => el.innerText !== t",
                                       arg=[box.locator(".widget-html-content").last.element_handle(), before],
                                       timeout=10_000)
        assert not page.errors, page.errors
    finally:
        tab.close_all()
    lab.shut_down_kernel(name)
    laps("checks after reopen")
    laps.report()
