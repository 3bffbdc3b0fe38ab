# Two entry points: `make demo` (core install, no torch) and `make test` (everything, incl. models).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.core-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[models,augment,ray,dev]'
	touch $@ $(VENV)/.core-installed

demo: $(VENV)/.core-installed
	$(BIN)/hsi demo --out demo-output

test: $(VENV)/.test-installed
	HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 $(BIN)/python -m pytest -n 2 --durations=15 -q

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) demo-output .pytest_cache
