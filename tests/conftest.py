"""Shared test fixtures, and the environment every notebook kernel inherits under nbval."""
import os

import pytest

import llm_dataflow as ldf

# The saved notebook outputs are CPU outputs: run the notebooks on the CPU even where a GPU is
# present, and ignore a reader's own checkpoint folder (chapter 01) while checking them.
os.environ["LDF_DEVICE"] = "cpu"
os.environ.pop("LDF_CHECKPOINT_DIR", None)
# calculators compute their whole static grid, as when the book is built (the saved outputs hold it)
os.environ.setdefault("LDF_STATIC_VIEWS", "1")


@pytest.fixture
def one_thread():
    """Run a test with one torch thread: on tiny tensors, thread start-up costs more than the work."""
    with ldf.torch_threads(1):
        yield


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Report the Chinese edition's translation coverage (tests/test_i18n.py) in every run."""
    try:
        from test_i18n import i18n_report_key
    except ImportError:
        return
    report = config.stash.get(i18n_report_key, None)
    if report:
        terminalreporter.write_sep("-", "translation coverage")
        terminalreporter.write_line(report)
