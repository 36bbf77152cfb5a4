# mtx — one command each: `make train`, `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Python 3.9-3.13 (pyproject.toml pins what each needs): PYTHON= when given, else the newest of
# python3.13 ... python3.9 on the PATH that runs (a pyenv shim of an inactive version is found but
# does not run, so each is asked for its version before it is taken).
SUPPORTED := (3, 9) <= sys.version_info[:2] <= (3, 13)
PYTHON ?= $(firstword $(foreach v,3.13 3.12 3.11 3.10 3.9,$(shell p=$$(command -v python$(v) 2>/dev/null) && "$$p" -c 'import sys; sys.exit(not ($(SUPPORTED)))' >/dev/null 2>&1 && echo "$$p")))
PYTHON_HELP := mtx needs Python 3.9-3.13 (MXNet 1.9.1); install one (e.g. apt-get install python3.12 python3.12-venv, or pyenv install 3.12) and run make install PYTHON=/path/to/python3.12
STAMP := $(VENV)/.installed
# oneMKL (the mkl extra, ~1 GB) for train.precision=bfloat16-mkl: where the CPU has AMX, whose
# bfloat16 products MXNet's own oneDNN never reaches; MKL=1 installs it anywhere, MKL=0 nowhere.
HAS_AMX := $(shell grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null && echo yes)
WITH_MKL := $(if $(filter 1,$(MKL)),yes,$(if $(filter 0,$(MKL)),,$(HAS_AMX)))
MKL_LINE := $(if $(WITH_MKL),oneMKL installed (mkl extra): $(if $(HAS_AMX),this CPU has AMX,MKL=1); train.precision=auto times its bfloat16 products,oneMKL not installed: $(if $(filter 0,$(MKL)),MKL=0,no AMX on this CPU); make install MKL=1 adds it (train.precision=bfloat16-mkl))
comma := ,
ifneq ($(MKL),)
.PHONY: $(STAMP)  # MKL= asked for: install again with or without the extra
endif
# CUDA=110 ... 117: MXNet's CUDA build (the mxnet-cuNNN wheel of MXNet 1.9.1, for CUDA 11.N) in
# place of the CPU wheel; CUDA=none: back to the CPU wheel; unset: the build the venv has (kept
# in $(VENV)/.mxnet-build; the CPU wheel in a new venv). README "GPUs".
CUDA_BUILDS := 110 111 112 113 114 115 116 117
CUDA_WHEELS := $(addprefix mxnet-cu,$(CUDA_BUILDS))
ifneq ($(filter-out none $(CUDA_BUILDS),$(CUDA))$(word 2,$(CUDA)),)
$(error CUDA=$(CUDA) is not an MXNet 1.9.1 CUDA build: use CUDA=110 ... CUDA=117 (mxnet-cu110 ... mxnet-cu117, for the CUDA 11.0 ... 11.7 libraries installed), or CUDA=none for the CPU build)
endif
BUILD_FILE := $(VENV)/.mxnet-build
BUILD_HAD := $(or $(shell cat $(BUILD_FILE) 2>/dev/null),cpu)
MXNET_BUILD := $(if $(CUDA),$(if $(filter none,$(CUDA)),cpu,cu$(CUDA)),$(BUILD_HAD))
ifneq ($(MXNET_BUILD),$(BUILD_HAD))
.PHONY: $(STAMP)  # another MXNet build was asked for: install again
endif
export MTX_MULTI30K_DIR ?= $(if $(wildcard ../shared/data/multi30k/SHA256SUMS),$(abspath ../shared/data/multi30k),)

.PHONY: help install data test test-quick lint train ablate bench browser clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

install: $(STAMP)  ## create .venv and install mtx with runtime and test dependencies; CUDA=110...117: MXNet's CUDA build instead of the CPU one (CUDA=none: back to it)

$(STAMP): pyproject.toml
	@test -x $(PY) || { [ -n "$(PYTHON)" ] && "$(PYTHON)" -c 'import sys; sys.exit(not ($(SUPPORTED)))' 2>/dev/null; } || { echo "error: $(if $(PYTHON),PYTHON=$(PYTHON) is not a Python 3.9-3.13 that runs,no Python 3.9-3.13 that runs on the PATH): $(PYTHON_HELP)" >&2; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel "setuptools<70" "cython<3"
	# One MXNet in the venv: the CPU wheel (mtx's dependency) and MXNet's CUDA wheels are all
	# imported as mxnet and write the same files, so a CUDA wheel goes before the CPU one returns.
	if $(PY) -m pip show $(CUDA_WHEELS) >/dev/null 2>&1; then $(PY) -m pip uninstall -qq -y mxnet $(CUDA_WHEELS); fi
	# pyproject.toml pins numpy for each Python; gluonnlp 0.10 is an sdist that pip builds.
	$(PY) -m pip install -q -e ".[test,serve,deploy$(if $(WITH_MKL),$(comma)mkl)]"
	@echo "$(MKL_LINE)"
	# CUDA=NNN: the CPU wheel goes and mxnet-cuNNN takes its place, at the numpy just installed.
	$(if $(filter cu%,$(MXNET_BUILD)),$(PY) -m pip uninstall -qq -y mxnet)
	$(if $(filter cu%,$(MXNET_BUILD)),$(PY) -m pip install -q "mxnet-$(MXNET_BUILD)==1.9.1" "numpy==$$($(PY) -c 'import numpy; print(numpy.__version__)')")
	# d2l 1.0.3 (tests, bench) pins packages without wheels past 3.11: there, without its pins.
	if $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then $(PY) -m pip install -q --no-deps "d2l==1.0.3"; fi
	# mtx's native CPU kernels (mtx/kernels): built with g++ now; without one, MXNet's ops are used.
	$(PY) -c "import mtx.kernels as k; print('native kernels:', 'built' if k.load() else 'not built')"
	echo $(MXNET_BUILD) > $(BUILD_FILE)
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
