"""The test suite's shared fixtures, markers, xdist groups, hypothesis profiles, and the
environment every notebook kernel inherits under nbval.

It lives at the repository root, not in tests/, so that it applies to ``pytest notebooks/…``
run alone too (a conftest in tests/ is not loaded for paths outside tests/).

Markers (set here from each test's file, so a new test in a file inherits its file's marks):

* ``browser`` — drives the built site in headless Chromium (tests/test_browser.py,
  tests/test_planner_page.py);
* ``lab``     — drives a real JupyterLab (tests/test_jupyterlab.py);
* ``site``    — needs the built site (the two above's site tests and tests/test_site.py);
* ``notebook``— a strict nbval cell of notebooks/*.ipynb;
* ``slow``    — everything above, plus the files in ``SLOW_FILES`` (each takes > ~10 s).

``pytest -m "not browser and not lab"`` runs everything but the real-browser tests;
``pytest -m "not slow"`` is the authors' inner loop (``make test-fast`` adds the notebooks a change
touches). ``make test`` runs all of it on two xdist workers (``-n 2 --dist loadgroup``): tests whose
module-scoped fixture is expensive run on one worker (``worker_group``) so it is built once.
"""
import os
import pathlib
import re

# Before torch loads (here and in every notebook kernel, which inherits the environment): OpenMP
# threads that finish their share sleep instead of spinning.  Two workers each running torch on
# two threads put four busy threads on two cores; spinning threads then steal the cores the
# others need.  Measured, notebook 05 under nbval beside other work: 235 s wall (197 s CPU) with
# the default policy, 119 s (95 s CPU) passive.  Measured outputs are masked under nbval; the
# notebooks themselves are executed (`make notebooks`) with the default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import llm_dataflow as ldf  # noqa: E402

# The saved notebook outputs are CPU outputs: run the notebooks on the CPU even where a GPU is
# present, and ignore a reader's own checkpoint folder (chapter 01) while checking them.
os.environ["LDF_DEVICE"] = "cpu"
os.environ.pop("LDF_CHECKPOINT_DIR", None)
# calculators compute their whole static grid, as when the book is built (the saved outputs hold it)
os.environ.setdefault("LDF_STATIC_VIEWS", "1")

# Hypothesis: a fixed example budget per property in every run ("default"); `HYPOTHESIS_PROFILE=long`
# searches ten times longer for a local hunt. Tests that set max_examples themselves keep theirs
# under "default" and are scaled by the profile's multiplier through `examples(n)`.
settings.register_profile("default", deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, max_examples=1000, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: Not collected: notebooks/zh_CN/ holds the 简体中文 chapter notebooks that tools/zh_notebooks.py
#: writes from the English ones (same code, the English run's outputs, translated prose);
#: strict nbval runs the English notebooks only, and tests/test_zh_notebooks.py checks these.
collect_ignore = ["notebooks/zh_CN"]

FILE_MARKS = {
    "test_browser.py": ("browser", "site", "slow"),
    "test_planner_page.py": ("browser", "site", "slow"),
    "test_jupyterlab.py": ("lab", "slow"),
    "test_site.py": ("site",),
}
#: files whose tests take > ~10 s in all (measured with --durations; kernels, processes, nbgrader)
SLOW_FILES = {"test_grading.py", "test_launch.py", "test_collectives.py", "test_parallel.py",
              "test_disagg.py", "test_i18n.py"}
#: files whose module-scoped fixture is expensive: keep each file on one xdist worker
#: (test_jupyterlab.py: every chapter is saved, then JupyterLab is loaded afresh once and every
#: chapter reopened; one server a worker, the even and the odd chapters on two workers)
GROUPED_FILES = {"test_grading.py", "test_chat_templates.py", "test_i18n.py", "test_site.py",
                 "test_jupyterlab.py"}


def pytest_configure(config):
    for name, what in [("browser", "drives the built site in headless Chromium"),
                       ("lab", "drives a real JupyterLab server in headless Chromium"),
                       ("site", "needs the built site (_build/html)"),
                       ("notebook", "a strict nbval cell of a notebook"),
                       ("slow", "slow: browsers, JupyterLab, notebooks, kernels, processes")]:
        config.addinivalue_line("markers", f"{name}: {what}")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_BookXdist(), "ldf-xdist-groups")


#: the order tests are handed to xdist workers: longest first (a notebook's cells, then a
#: JupyterLab chapter, then the browser tests), so the short unit tests fill the gaps at the end
#: instead of one long notebook running alone on one worker while the other idles.
_ORDER = {"notebook": 0, "lab": 1, "browser": 2}


def _rank(item) -> int:
    return min((_ORDER[m.name] for m in item.iter_markers() if m.name in _ORDER), default=3)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = pathlib.Path(str(item.fspath))
        if path.suffix == ".ipynb":
            item.add_marker("notebook")
            item.add_marker("slow")
            continue
        for m in FILE_MARKS.get(path.name, ()):
            item.add_marker(m)
        if path.name in SLOW_FILES:
            item.add_marker("slow")
    items.sort(key=_rank)    # stable: a notebook's cells keep their order


def worker_group(nodeid: str) -> str:
    """The unit one xdist worker runs whole (``make test``'s ``--dist loadgroup``), from the test's
    node id alone (the controller schedules by node id):

    * a notebook's cells (``notebooks/NN_x.ipynb::Cell k``): nbval runs them in order in one kernel;
    * every test of a file in ``GROUPED_FILES``: its module-scoped fixture is expensive
      (``tests/test_jupyterlab.py``: its even and its odd chapters, two groups);
    * the per-page tests of ``tests/test_browser.py`` for one page at one width (``[rel-width]``,
      or ``[rel]`` for the desktop-only one): the page is opened once per process and each test
      reads that visit;
    * any other test: itself.

    (pytest-xdist's own ``xdist_group`` mark does not work with pytest 9, whose node ids are no
    longer the ``_nodeid`` attribute xdist 3.8 rewrites; so the groups are this function.)
    """
    path, _, rest = nodeid.partition("::")
    name = path.rpartition("/")[2]
    if name.endswith(".ipynb"):
        return f"notebook:{path}"
    chapter = re.search(r"\[(\d\d)_", rest)
    if name == "test_jupyterlab.py" and chapter:
        # two halves (even and odd chapters, about 170 s each on 2 cores), each with its own
        # server: a chapter's first day and its reopening stay in one half, on one worker
        return f"file:{path}:{int(chapter.group(1)) % 2}"
    if name in GROUPED_FILES:
        return f"file:{path}"
    if name == "test_browser.py" and "[" in rest:
        param = rest[rest.index("[") + 1:rest.rindex("]")]
        if rest.startswith(("test_results_fit_at_desktop_width[", "test_page_weight[",
                            "test_every_calculator_follows_its_controls[")):
            param += "-desktop"
        if param.endswith(("-desktop", "-phone")):
            return f"page:{param}"
    return nodeid


class _BookXdist:
    """Registered when pytest-xdist is active (``pytest_configure``): the hook is xdist's."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        if config.getoption("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class BookScheduling(LoadScopeScheduling):
            """``--dist loadgroup`` with the groups of :func:`worker_group`; units go to whichever
            worker is free, in collection order (longest first, see ``_ORDER``)."""

            def _split_scope(self, nodeid: str) -> str:
                return worker_group(nodeid)

        return BookScheduling(config, log)


#: Flags that keep Chromium off the network and quiet (/work/shared/FACTS.md)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage",
                 # the (software) compositor in the browser process, not a GPU process of its own:
                 # measured, 66 browser tests on 2 workers used 135 CPU-s without it (twice), 126 with
                 "--in-process-gpu",
                 # no host but this machine resolves: a page's request to another host fails here
                 # as it would for a reader offline (the tests also record and fail it)
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"]


@pytest.fixture(scope="session")
def chromium_browser():
    """One headless Debian Chromium per test process, shared by tests/test_browser.py,
    tests/test_planner_page.py and tests/test_jupyterlab.py (each test opens its own context):
    Playwright's sync API cannot start a second instance while one is running in the process."""
    from _browsers import chromium, require   # tests/ is on sys.path for the tests that use this

    sync_api = pytest.importorskip("playwright.sync_api")
    exe = chromium()
    require(exe is not None, "Debian chromium not found (apt-get install -y chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def one_thread():
    """Run a test with one torch thread: on tiny tensors, thread start-up costs more than the work."""
    with ldf.torch_threads(1):
        yield


# The Chinese edition's translation coverage (tests/test_i18n.py) is reported at the end of every
# run. The test puts it in its report's user_properties, which xdist carries back to the controller.
_I18N_REPORTS: list[str] = []


def pytest_runtest_logreport(report):
    for key, value in getattr(report, "user_properties", ()):
        if key == "i18n-coverage" and value not in _I18N_REPORTS:
            _I18N_REPORTS.append(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _I18N_REPORTS:
        terminalreporter.write_sep("-", "translation coverage")
        for line in _I18N_REPORTS:
            terminalreporter.write_line(line)
