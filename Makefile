# prenet — the two commands of the README: `make run` (the main job) and `make test` (the test suite).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed-stamp
UV_VERSION := 0.13.9

export PATH := $(BIN):$(PATH)
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
# bytecode is written on first import into .venv and the checkout's __pycache__ (.gitignore, .dvcignore): see $(STAMP)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install install-distributed data-deps run test test-deps test-slow test-distributed params lint clean-data help results
help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# uv installs the pinned lock from pip's own sources (scripts/pip_sources.py) in ~20 s where pip takes ~2 min on
	# 2 cores; where uv cannot be had, pip does it. Neither byte-compiles the 19k modules: the ~2.6k that the stages
	# import are compiled once, on first import (11 s), because this Makefile lets Python write bytecode
	# (PYTHONDONTWRITEBYTECODE is unexported above; with it set, every stage would recompile torch: 8 s each)
	{ $(BIN)/python -m pip install -q uv==$(UV_VERSION) && \
	  $(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match \
	    $$($(BIN)/python scripts/pip_sources.py) -r requirements.lock; } || \
	  { echo "note: uv unavailable or failed; installing with pip (about 2 minutes)"; \
	    $(BIN)/python -m pip install -q --no-compile -r requirements.lock; }
	$(BIN)/python -m pip install -q --no-deps -e .
	@! $(BIN)/python -m pip list 2>/dev/null | grep -iE '^(nvidia|triton)' || (echo "error: CUDA packages were resolved; see README" && false)
	@touch $@

install: $(STAMP) data-deps  ## create/reuse .venv with the pinned dependencies (CPU torch 2.13.0, xgboost-cpu) and the datasets

FASHION_DIR ?= $(or $(PRENET_FASHION_MNIST_DIR),/usr/share/datasets/fashion-mnist)
data-deps: $(STAMP)  ## Debian's dataset-fashion-mnist (apt-get where this user may), then its pinned SHA-256s checked
	@test -f $(FASHION_DIR)/t10k-labels-idx1-ubyte.gz || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing dataset-fashion-mnist (apt-get)"; \
	    apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; } \
	      || echo "warning: could not install dataset-fashion-mnist; stages that need Fashion-MNIST will stop and say how to install it"; \
	  else echo "note: dataset-fashion-mnist is not installed and this user cannot apt-get it (sudo apt-get install dataset-fashion-mnist)"; fi; }
	@python -c "from prenet import datasets as d; d.fashion_mnist_available() and d.verify_fashion_mnist()"

params: $(STAMP)  ## regenerate params.yaml from conf/ (Hydra compose; never edit params.yaml by hand)
	python -m pipeline.compose

run: $(STAMP) data-deps  ## the main job: dvc repro on the embedded defaults, then the README's Results section from its metrics
	dvc repro
	python scripts/write_results.py
	@echo
	@echo "Results:"
	@echo "  report   $(abspath data/report/index.html)"
	@echo "  metrics  data/metrics/*.json   (headline scalars: dvc metrics show; full records in data/plots/*.json)"
	@echo "  models   data/models/   (wall times of the stages: data/run_log.jsonl)"

# make test's pytest processes (pytest-xdist): the 2 cores the contract gives it, one torch thread each (tests/conftest.py)
TEST_WORKERS ?= 2

test: $(STAMP) test-deps data-deps  ## the test suite (slow tests excluded; see test-slow), in TEST_WORKERS processes
	python -m pytest -q -n $(TEST_WORKERS)

test-deps:  ## Debian's chromium for the report's browser test (installed when this user may; else that test skips)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the report's browser test"; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	      || echo "warning: could not install chromium; the browser test will skip (or fail with PRENET_REQUIRE_CHROMIUM=1)"; \
	  else echo "note: chromium is not installed and this user cannot apt-get it; the report's browser test will skip"; fi; }

results: $(STAMP)  ## rewrite the README's Results section from data/metrics (make run does this)
	python scripts/write_results.py

test-slow: $(STAMP)  ## only the slow tests
	python -m pytest -q -m slow

DIST_STAMP := $(VENV)/.distributed-stamp
$(DIST_STAMP): $(STAMP) requirements-distributed.lock
	$(BIN)/python -m pip install -q -r requirements-distributed.lock
	@! $(BIN)/python -m pip list 2>/dev/null | grep -iE '^(nvidia|triton)' || (echo "error: CUDA packages were resolved; see README" && false)
	@touch $@

install-distributed: $(DIST_STAMP)  ## dvc-s3 (an S3-compatible DVC remote) and moto_server, for `prenet distribute` and its tests

test-distributed: $(DIST_STAMP) data-deps  ## the fault tests: local Prefect server, two process workers, moto_server as DVC remote (~3 min)
	python -m pytest -q -m distributed -p no:cacheprovider

lint: $(STAMP)  ## ruff: lint rules and formatting (pyproject.toml [tool.ruff]); `ruff format .` fixes the formatting
	ruff check .
	ruff format --check .

clean-data:  ## remove every stage output (keeps vendored data/external and data/hardware)
	rm -rf data/raw data/features data/validated data/split data/models data/metrics data/plots data/report
