# One entry point for readers, authors and CI.
#   make book       install everything into .venv and build the web book (_build/html/index.html)
#   make test       unit tests + strict nbval over every notebook (+ site tests once the book is built)
#   make notebooks  re-execute every notebook in place (outputs and widget state saved)
#   make lab        open the notebooks in JupyterLab
#   make gpu-check  on a CUDA machine: measure it against the presets and bounds (artifacts/gpu/);
#                   make gpu-check ARGS=--dry-run lists the steps
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: install book test notebooks lab clean gpu-check

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt -e .
	touch $@

book: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash tools/build_book.sh

test: install
	$(PY) -m pytest

notebooks: install
	$(PY) tools/notebook_hygiene.py --fix
	$(PY) tools/execute_notebooks.py
	$(PY) tools/notebook_hygiene.py --fix

lab: install
	$(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

gpu-check: install
	$(PY) tools/gpu_check.py $(ARGS)

clean:
	rm -rf _build
