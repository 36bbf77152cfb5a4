# mtx — one command each: `make train`, `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Python 3.9-3.13 (pyproject.toml pins what each needs): PYTHON= when given, else the newest of
# python3.13 ... python3.9 on the PATH that runs (a pyenv shim of an inactive version is found but
# does not run, so each is asked for its version before it is taken).
SUPPORTED := (3, 9) <= sys.version_info[:2] <= (3, 13)
PYTHON ?= $(firstword $(foreach v,3.13 3.12 3.11 3.10 3.9,$(shell p=$$(command -v python$(v) 2>/dev/null) && "$$p" -c 'import sys; sys.exit(not ($(SUPPORTED)))' >/dev/null 2>&1 && echo "$$p")))
PYTHON_HELP := mtx needs Python 3.9-3.13 (MXNet 1.9.1); install one (e.g. apt-get install python3.12 python3.12-venv, or pyenv install 3.12) and run make PYTHON=/path/to/python3.12
STAMP := $(VENV)/.installed
export MTX_MULTI30K_DIR ?= $(if $(wildcard ../shared/data/multi30k/SHA256SUMS),$(abspath ../shared/data/multi30k),)

.PHONY: help install data test test-quick lint train ablate bench browser clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

install: $(STAMP)  ## create .venv and install mtx with runtime and test dependencies

$(STAMP): pyproject.toml
	@test -x $(PY) || { [ -n "$(PYTHON)" ] && "$(PYTHON)" -c 'import sys; sys.exit(not ($(SUPPORTED)))' 2>/dev/null; } || { echo "error: $(if $(PYTHON),PYTHON=$(PYTHON) is not a Python 3.9-3.13 that runs,no Python 3.9-3.13 that runs on the PATH): $(PYTHON_HELP)" >&2; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel "setuptools<70" "cython<3"
	# pyproject.toml pins numpy for each Python; gluonnlp 0.10 is an sdist that pip builds.
	$(PY) -m pip install -q -e ".[test,serve,deploy]"
	# d2l 1.0.3 (tests, bench) pins packages without wheels past 3.11: there, without its pins.
	if $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then $(PY) -m pip install -q --no-deps "d2l==1.0.3"; fi
	# mtx's native CPU kernels (mtx/kernels): built with g++ now; without one, MXNet's ops are used.
	$(PY) -c "import mtx.kernels as k; print('native kernels:', 'built' if k.load() else 'not built')"
	touch $(STAMP)

data: install  ## download and verify the Multi30k files into data/ (MTX_DATA_DIR moves it), no training
	$(PY) scripts/download.py $(ARGS)

test: install  ## the whole test suite except GPU tests (.ci/run runs it, browser test required)
	$(PY) -m pytest -m "not gpu"

test-quick: install  ## the fast tests only (no training, no script run end to end)
	$(PY) -m pytest -m "not slow and not gpu"

lint: install  ## ruff (pinned in pyproject.toml) over mtx/, scripts/ and tests/
	$(PY) -m ruff check mtx scripts tests

train: install  ## train the default model on Multi30k en->de and print sacreBLEU
	$(PY) scripts/train.py $(ARGS)

ABLATE_MINUTES ?= 20
ablate: install  ## head-count ablation at a fixed width and budget (Hydra multirun), then one table
	$(PY) scripts/train.py sweep=heads train.max_minutes=$(ABLATE_MINUTES) hydra.sweep.dir=outputs/ablate $(ARGS)
	$(PY) scripts/collect.py outputs/ablate

BENCH_ARGS ?= train
bench: install  ## training speed of mtx and every peer on the default model; ARGS="decode --run RUN" etc.: python -m mtx.bench --help
	$(PY) scripts/bench.py $(or $(ARGS),$(BENCH_ARGS))

browser:  ## headless Chromium + chromedriver from Debian's archive, for the page's browser test (as root; nothing if present)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

clean:  ## remove outputs/ and test caches
	rm -rf outputs .pytest_cache
