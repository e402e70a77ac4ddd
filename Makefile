# One entry point for readers, authors and CI.
#   make book       install everything into .venv and build the web book (_build/html/index.html)
#   make test       everything: unit, hypothesis, strict nbval of every notebook, and (once the book
#                   is built) the site, browser (both editions, both widths) and JupyterLab tests, on
#                   two pytest-xdist workers (TEST_WORKERS=n to change)
#   make test-fast  the authors' inner loop: tests not marked slow + strict nbval of the notebooks
#                   your change touches (tools/test_fast.py --dry-run says which and why)
#   make notebooks  re-execute every notebook in place (outputs and widget state saved)
#   make lab        open the notebooks in JupyterLab (widget state saved with the notebook, MyST rendered)
#   make lab-assignments  open the graded assignments in JupyterLab (with nbgrader's Validate button)
#   make gpu-check  on a CUDA machine: measure it against the presets and bounds (artifacts/gpu/);
#                   make gpu-check ARGS=--dry-run lists the steps
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: install book test test-fast notebooks lab lab-assignments clean gpu-check

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt -e .
	touch $@

book: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/build_book.sh

TEST_WORKERS ?= 2
# Each worker rewrites the asserts of every test module it collects; with bytecode writing on, pytest
# keeps the rewritten modules in tests/__pycache__ (gitignored) and a later run reads them: measured,
# collection 12.0 s -> 7.2 s per worker. An environment that turns writing off
# (PYTHONDONTWRITEBYTECODE=1) pays the rewrite again in every run, so the test targets turn it on.
PYTEST_ENV = PYTHONDONTWRITEBYTECODE=

test: install
	$(PYTEST_ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-fast: install
	$(PYTEST_ENV) $(PY) tools/test_fast.py -n $(TEST_WORKERS) $(NOTEBOOKS)

notebooks: install
	$(PY) tools/notebook_hygiene.py --fix --before-run
	$(PY) tools/execute_notebooks.py
	$(PY) tools/notebook_hygiene.py --fix && $(PY) tools/zh_notebooks.py

# tools/lab_settings.py: save widget state on save, no news prompt (both targets); the chapters'
# JupyterLab gets a config directory that turns nbgrader's UI off (no Validate on lessons).
LAB_ARGS = $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_SETTINGS = $(abspath $(VENV))/share/jupyter/lab/settings
LAB_CHAPTERS = $(abspath $(VENV))/etc/ldf-chapters

lab: install
	$(PY) tools/lab_settings.py $(LAB_SETTINGS) $(LAB_CHAPTERS)
	JUPYTER_CONFIG_PATH="$(LAB_CHAPTERS)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(VENV)/bin/jupyter lab notebooks/ $(LAB_ARGS)

lab-assignments: install
	$(PY) tools/lab_settings.py $(LAB_SETTINGS)
	$(VENV)/bin/jupyter lab assignments/release/ $(LAB_ARGS)

gpu-check: install
	$(PY) tools/gpu_check.py $(ARGS)

clean:
	rm -rf _build
