"""Helpers the real-browser tests share (tests/test_browser.py, tests/test_jupyterlab.py)."""
from __future__ import annotations

import os
import pathlib
import shutil

import pytest


def require(condition: bool, why: str):
    """Skip the test when ``condition`` is false — or fail it when ``LDF_REQUIRE_SITE`` is set (CI)."""
    if not condition:
        if os.environ.get("LDF_REQUIRE_SITE"):
            pytest.fail(why + " (LDF_REQUIRE_SITE is set)")
        pytest.skip(why)


def chromium() -> str | None:
    """Debian's chromium binary (``LDF_CHROMIUM`` overrides), or None; never a downloaded browser."""
    for c in (os.environ.get("LDF_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if c and pathlib.Path(c).is_file():
            return c
    return None
