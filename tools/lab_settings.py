"""JupyterLab settings for reading the book locally (``make lab``, ``make lab-assignments``).

    python tools/lab_settings.py APP_SETTINGS_DIR [CHAPTERS_CONFIG_DIR]

1. ``APP_SETTINGS_DIR/overrides.d/llm_dataflow.json`` (JupyterLab's app-level setting overrides;
   ``make lab`` passes ``.venv/share/jupyter/lab/settings``): the widget manager saves widget
   state into the notebook on save (``saveState``), so a calculator or a finished progress line
   still shows after the notebook is closed and reopened instead of "Error displaying widget:
   model not found"; and JupyterLab does not ask to fetch news from the internet.
2. ``CHAPTERS_CONFIG_DIR/labconfig/page_config.json`` (a Jupyter config directory that ``make
   lab`` adds with ``JUPYTER_CONFIG_PATH``): nbgrader's JupyterLab extension is disabled while
   reading the chapters — its "Validate" button would run a lesson that has no tests and report
   "Success!".  ``make lab-assignments`` does not add this directory, so Validate is there for the
   graded assignments.

``tests/test_jupyterlab.py`` starts JupyterLab with the same files (written into temporary
directories) — one definition of what a reader's JupyterLab is.
"""
from __future__ import annotations

import json
import pathlib
import sys

#: Setting overrides (plugin id → settings) written for every JupyterLab started by the Makefile.
OVERRIDES = {
    # jupyterlab-manager (ipywidgets 8) keeps widget state in the notebook's metadata on save.
    # Upstream caveat: with saveState on, a notebook whose saved widgets are shown again opens
    # marked modified (the manager sets the dirty flag when it registers the restored models).
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
    # no "Would you like to get notified about official Jupyter news?" prompt, no news request
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}

#: Page config of the chapters' JupyterLab: no grading UI on lessons without tests.
CHAPTERS_PAGE_CONFIG = {"disabledExtensions": {"@jupyter/nbgrader": True}}


def write(app_settings_dir, chapters_config_dir=None) -> list[pathlib.Path]:
    """Write the files described in the module docstring; returns their paths."""
    written = []
    target = pathlib.Path(app_settings_dir) / "overrides.d" / "llm_dataflow.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(OVERRIDES, indent=2) + "\n", encoding="utf-8")
    written.append(target)
    if chapters_config_dir is not None:
        page = pathlib.Path(chapters_config_dir) / "labconfig" / "page_config.json"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(json.dumps(CHAPTERS_PAGE_CONFIG, indent=2) + "\n", encoding="utf-8")
        written.append(page)
    return written


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for p in write(*argv):
        print(f"lab_settings: wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
