# Two commands for a newcomer: `make run` (demo server) and `make test` (the test suite).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.PHONY: run test setup setup-dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Base install + the demo corpus generator (matplotlib). No torch, no GPU, no network at run time.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run

setup: $(VENV)/.installed-run
setup-dev: $(VENV)/.installed-dev

## run: build and ingest the demo corpus, then serve it on http://$(HOST):$(PORT)
run: setup
	$(BIN)/ragspine demo --host $(HOST) --port $(PORT)

## test: everything but GPU tests
test: setup-dev
	$(BIN)/python -m pytest -m "not gpu" $(PYTEST_ARGS)

bench: setup-dev
	$(BIN)/python bench/lexical.py

clean:
	rm -rf $(VENV) .ragspine .pytest_cache
