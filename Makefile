# Entry points: `make demo` (core install, no torch), `make test` (everything, incl. models) and
# `make docs` (the Sphinx site in docs/_build/html, warnings as errors).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint docs clean gpu-kit

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.core-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[models,augment,ray,dev]'
	touch $@ $(VENV)/.core-installed

$(VENV)/.docs-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $@ $(VENV)/.core-installed

demo: $(VENV)/.core-installed
	$(BIN)/hsi demo --out demo-output

test: $(VENV)/.test-installed
	HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 $(BIN)/python -m pytest -n 2 --durations=15 -q

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# No notebooks run and nothing is downloaded: the pages, the parser and the docstrings only.
docs: $(VENV)/.docs-installed
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

# The wheels a lent GPU machine lacks (Python 3.12, no package index), read from an environment with every
# extra installed: .gpu-kit/ (KIT.md says what and why). KIT_PYTHON=path/to/python to use another one.
KIT_PYTHON ?= $(BIN)/python
gpu-kit:
	$(KIT_PYTHON) benchmarks/gpu_kit.py --out .gpu-kit

clean:
	rm -rf $(VENV) demo-output .pytest_cache docs/_build .gpu-kit
