# Makefile for the low-precision numerics course.
#
#   make lab        set up .venv (if needed) and open JupyterLab at the repo root
#   make test       set up .venv (if needed) and run every test: ruff (lint, format), import-linter, unit tests + nbval
#   make lock       regenerate the lock files requirements/cpu.txt and requirements/gpu.txt
#   make exercises  regenerate exercises/ from solutions/
#   make site       build the course website into build/site/html (nothing is executed), in its
#                   own .venv-site with the site extra alone: no torch, Triton or JupyterLab
#   make bench      run the benchmark scripts in benchmarks/
#   make gpu-compile  compile every kernel for sm_90 and sm_80 without a GPU: registers, spills, shared memory
#   make gpu-targets  compile the chapters' GPU launches for sm_75/80/89/90 without a GPU (docs/gpu.md)
#   make gpu-report on an NVIDIA GPU: kernel tests compiled, every benchmarks/gpu_*.py, nbval; one summary
#   make clean      delete .venv and caches
#
# Variables you may override on the command line:
#   PYTHON=python3.11   interpreter used to create .venv (must be >= 3.11)
#   DEVICE=cpu|gpu      which PyTorch build to install (default: auto-detect)
#   DEPS=locked|newest|lowest   which versions to install (default: locked; see below)
#   SYSTEM_PACKAGES=auto|no     `make test` as root installs bubblewrap and Chromium with
#                       apt-get when they are missing (auto); no: never, only say so
#   TORCH_CPU_INDEX=... where the CPU-only PyTorch wheels come from
#   LAB_ARGS="--no-browser --port 8899"   extra arguments for `jupyter lab`
#   PYTEST_ARGS="-x -k formats"           extra arguments for pytest
#   TEST_WORKERS=logical|N|0              pytest-xdist workers for `make test` (0: one process)

# Version pins. torch and triton move together: PyPI's CUDA build of torch 2.13.0
# requires exactly triton 3.7.1. On a CPU machine we install the CPU-only torch
# wheel (which does not pull triton) and add the same triton by hand, so that the
# Triton kernels run in the interpreter (TRITON_INTERPRET=1) with the same Triton
# version a GPU machine compiles them with. environment.yml repeats these pins
# (tests/test_repo_setup.py checks they agree).
TORCH_VERSION  := 2.13.0
TRITON_VERSION := 3.7.1

# Versions of everything else. pyproject.toml keeps the ranges the package works with; the
# lock keeps one exact set of every package `make install` puts in .venv, the set the tests
# and the committed outputs are checked with: requirements/cpu.txt (DEVICE=cpu) and
# requirements/gpu.txt (DEVICE=gpu), for CPython $(LOCK_PYTHON) on Linux x86-64. `make lock`
# regenerates both with uv (README, "Versions").
#   DEPS=locked  .venv: the versions in the lock (on another Python or platform, where the
#                lock does not apply, it says so and installs the newest the ranges allow)
#   DEPS=newest  .venv-newest: the newest releases the ranges in pyproject.toml allow
#   DEPS=lowest  .venv-lowest: each direct dependency at the lowest version its range allows
# The last two are how a release that changes a behaviour is found before a reader finds it
# (.github/workflows/ranges.yml runs both every week).
DEPS          ?= locked
UV_VERSION    := 0.13.8
LOCK_PYTHON   := 3.11
LOCK_PLATFORM := x86_64-manylinux_2_28
SYSTEM_PACKAGES ?= auto

PYTHON          ?= python3
DEVICE          ?= auto
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
LAB_ARGS        ?=
PYTEST_ARGS     ?=

ifeq ($(DEPS),locked)
  VENV := .venv
else ifneq ($(filter newest lowest,$(DEPS)),)
  VENV := .venv-$(DEPS)
else
  $(error DEPS must be locked, newest or lowest (got '$(DEPS)'))
endif
VPY     := $(VENV)/bin/python
VPIP    := $(VPY) -m pip

# DEVICE=auto -> gpu when `nvidia-smi -L` lists a GPU, else cpu.
ifeq ($(DEVICE),auto)
  TORCH_DEVICE := $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
else
  TORCH_DEVICE := $(DEVICE)
endif
ifneq ($(filter-out cpu gpu,$(TORCH_DEVICE)),)
  $(error DEVICE must be auto, cpu or gpu (got '$(DEVICE)'))
endif

# One stamp per device kind: `make install` does nothing while the stamp is newer
# than pyproject.toml and this Makefile; asking for the other device reinstalls torch.
STAMP := $(VENV)/.installed-$(TORCH_DEVICE)
LOCK  := requirements/$(TORCH_DEVICE).txt
# What every pip command of `make install` is constrained by: a copy of the lock (DEPS=locked),
# nothing (DEPS=newest), or the lowest versions the ranges allow, resolved by uv (DEPS=lowest).
CONSTRAINTS := $(VENV)/constraints.txt

# What `make test` runs: the unit tests in tests/ and, through nbval, every
# notebook in notebooks/, solutions/ and exercises/ (folders that exist).
# --nbval-lax:          run every cell, compare only the outputs of cells marked
#                       `# NBVAL_CHECK_OUTPUT`
# --nbval-current-env:  run notebooks with this venv's Python, not a kernelspec
# --nbval-cell-timeout: seconds per cell (pytest-timeout, set in pyproject.toml,
#                       is the longer backstop)
# --nbval-sanitize-with: regexes that mask addresses, timings, paths in outputs
TEST_PATHS := $(wildcard tests notebooks solutions exercises)
NBVAL_ARGS := --nbval-lax --nbval-current-env --nbval-cell-timeout=600 \
              --nbval-sanitize-with tests/nbval_sanitize.cfg
# pytest-xdist: one worker per core the machine has (TEST_WORKERS=logical; TEST_WORKERS=0 runs
# everything in one process). --dist loadfile hands each worker whole files, in order: a
# notebook's cells run in one kernel, a module's fixtures are made once, and no two workers share
# a notebook or a module (conftest.py keeps the files that build the website together, and hands
# out tests/test_exercises.py, which shares nothing between its tests, a chapter at a time).
# --durations prints the slowest tests at the end, so that where the time goes is in every log.
TEST_WORKERS ?= logical
XDIST_ARGS := -n $(TEST_WORKERS) --dist loadfile
DURATION_ARGS := --durations=25 --durations-min=5

BENCHMARKS := $(sort $(wildcard benchmarks/bench_*.py))

.PHONY: venv install lab test exercises site bench clean lock system-packages

## venv: create .venv with $(PYTHON) unless it exists
venv: $(VPY)

# The website's venv (`make site`, below): the site extra alone.
SITE_VENV := .venv-site
SITE_VPY  := $(SITE_VENV)/bin/python

$(VPY) $(SITE_VPY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: '$(PYTHON)' not found; run e.g.: make PYTHON=python3.11 $(MAKECMDGOALS)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: this course needs Python >= 3.11, but '$(PYTHON)' is $$($(PYTHON) --version 2>&1)."; \
	  echo "       Install a newer Python and run e.g.: make PYTHON=python3.11 $(MAKECMDGOALS)"; \
	  exit 1; }
	$(PYTHON) -m venv $(patsubst %/bin/python,%,$@)

## install: everything the notebooks and tests need, into .venv (idempotent)
install: $(STAMP)

# The lock applies to the Python it was made for; on another one, say so and use the ranges.
LOCK_FITS := import platform, sys; sys.exit(not (sys.platform == "linux" and platform.machine() == "x86_64" \
  and "%d.%d" % sys.version_info[:2] == "$(LOCK_PYTHON)"))

$(CONSTRAINTS): $(LOCK) pyproject.toml Makefile | $(VPY)
ifeq ($(DEPS),locked)
	@if $(VPY) -c '$(LOCK_FITS)'; then \
	  cp $(LOCK) $@ && echo ">>> the versions in $(LOCK)"; \
	else \
	  echo "WARNING: $(LOCK) is for CPython $(LOCK_PYTHON) on Linux x86-64, and this is" \
	       "$$($(VPY) -c 'import platform; print(platform.python_version(), platform.system(), platform.machine())'):" \
	       "installing the newest versions pyproject.toml allows instead"; \
	  : > $@; \
	fi
else ifeq ($(DEPS),newest)
	@echo ">>> the newest versions pyproject.toml allows" && : > $@
else
	@echo ">>> the lowest versions pyproject.toml allows for each direct dependency (uv, --resolution lowest-direct)"
	$(VPIP) install uv==$(UV_VERSION)
	UV_PYTHON_DOWNLOADS=never $(VENV)/bin/uv pip compile pyproject.toml --extra lab --extra test \
	  --resolution lowest-direct --python $(VPY) --no-header --no-annotate -o $@
endif

# DEPS=newest upgrades what an older .venv-newest already has.
UPGRADE := $(if $(filter newest,$(DEPS)),--upgrade --upgrade-strategy eager)

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS) | $(VPY)
	@echo ">>> installing into $(VENV) for DEVICE=$(TORCH_DEVICE), DEPS=$(DEPS)"
	$(VPIP) install --upgrade pip -c $(CONSTRAINTS)
ifeq ($(TORCH_DEVICE),gpu)
	@# A CPU wheel (2.13.0+cpu) also satisfies torch==2.13.0; remove it so pip
	@# fetches the CUDA build from PyPI, which brings triton==$(TRITON_VERSION) itself.
	@if $(VPY) -c 'import sys, torch; sys.exit("+cpu" not in torch.__version__)' 2>/dev/null; then \
	  $(VPIP) uninstall -y torch; fi
	$(VPIP) install torch==$(TORCH_VERSION) -c $(CONSTRAINTS)
else
	@# Only torch itself comes from the CPU index (one look-up there); its
	@# dependencies come from PyPI in the second command.
	$(VPIP) install --no-deps torch==$(TORCH_VERSION) --extra-index-url $(TORCH_CPU_INDEX) -c $(CONSTRAINTS)
	$(VPIP) install torch==$(TORCH_VERSION) -c $(CONSTRAINTS)
	@# Triton publishes Linux wheels only; elsewhere (macOS) skip it with a warning:
	@# the notebooks that launch Triton kernels (chapter 03's GEMM on) then cannot run them.
	@if [ "$$(uname -s)" = Linux ]; then \
	  echo "$(VPIP) install triton==$(TRITON_VERSION) -c $(CONSTRAINTS)"; \
	  $(VPIP) install triton==$(TRITON_VERSION) -c $(CONSTRAINTS); \
	else \
	  echo "WARNING: no Triton wheels for $$(uname -s); Triton kernels will not run here."; \
	fi
endif
	$(VPIP) install $(UPGRADE) -e '.[lab,test]' -c $(CONSTRAINTS)
	@# Register the venv's Python as the `python3` kernel inside the venv only
	@# (--sys-prefix), so Jupyter started from .venv runs notebooks with it.
	$(VPY) -m ipykernel install --sys-prefix --name python3 \
	  --display-name 'Python 3 (lowprec-course)'
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo ">>> $(VENV) ready (DEVICE=$(TORCH_DEVICE), DEPS=$(DEPS))"

## lock: regenerate requirements/cpu.txt and requirements/gpu.txt (README, "Versions")
# uv resolves for a platform other than the one it runs on, so both locks, the CPU one and the
# CUDA one, are made on any machine. It keeps the versions already in a lock file unless told
# otherwise: `make lock LOCK_ARGS=--upgrade` (everything) or
# `make lock LOCK_ARGS="--upgrade-package ml-dtypes"` (one package).
# torch's CPU build comes from $(TORCH_CPU_INDEX); where that index cannot be reached and a
# folder of wheels holds the build (pip's PIP_FIND_LINKS), from that folder.
LOCK_ARGS ?=
TORCH_CPU_FIND_LINKS ?= $(PIP_FIND_LINKS)
ifneq ($(strip $(TORCH_CPU_FIND_LINKS)),)
  TORCH_CPU_SOURCE := --find-links $(TORCH_CPU_FIND_LINKS)
else
  TORCH_CPU_SOURCE := --extra-index-url $(TORCH_CPU_INDEX) --index-strategy unsafe-best-match
endif
UV_COMPILE = UV_PYTHON_DOWNLOADS=never $(VENV)/bin/uv pip compile pyproject.toml - --extra lab --extra test \
  --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) --custom-compile-command 'make lock' $(LOCK_ARGS)

lock: | $(VPY)
	$(VPIP) install uv==$(UV_VERSION)
	printf 'pip\ntorch==$(TORCH_VERSION)\ntriton==$(TRITON_VERSION)\n' | \
	  $(UV_COMPILE) $(TORCH_CPU_SOURCE) -o requirements/cpu.txt
	printf 'pip\ntorch==$(TORCH_VERSION)\ntriton==$(TRITON_VERSION)\n' | \
	  $(UV_COMPILE) -o requirements/gpu.txt

## lab: open JupyterLab at the repo root (notebooks/, exercises/, solutions/)
# Jupyter refuses to run as root unless told to (containers, CI machines).
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

lab: install
	$(VENV)/bin/jupyter lab $(LAB_ROOT) $(LAB_ARGS)

## system-packages: bubblewrap (the grader's sandbox) and Chromium (the website's browser test)
# As root with apt-get it installs what is missing; otherwise it prints one line per missing
# package with the command that installs it, and the tests that need it are skipped.
system-packages:
	@SYSTEM_PACKAGES=$(SYSTEM_PACKAGES) sh scripts/system-packages.sh

## test: the linters, then unit tests + every notebook through nbval
# ruff (pyproject.toml, [tool.ruff]) lints the code and the notebooks and checks they are formatted
# (`ruff format .` formats them: code at 120 columns, notebooks at 75, their ruff.toml); lint-imports
# checks the package's layers (pyproject.toml, [tool.importlinter]).
test: install system-packages
	$(VPY) -m ruff check .
	$(VPY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest $(XDIST_ARGS) $(DURATION_ARGS) $(NBVAL_ARGS) $(PYTEST_ARGS) $(TEST_PATHS)

## exercises: regenerate exercises/ from solutions/
exercises: install
	$(VPY) -m nbhelpers.tooling.make_exercises

## site: the course website from the committed notebooks, into $(SITE_DIR)/html (README, "The website")
# The build executes nothing and imports neither nbhelpers nor torch: it needs the site extra of
# pyproject.toml alone (Sphinx, MyST-NB, the book theme, MathJax), which `site/build.py
# --requirements` prints. `make site` installs that into its own venv, $(SITE_VENV), at the lock's
# versions where the lock applies (on another Python: the newest the pins allow, with a warning),
# as .github/workflows/pages.yml does: a few minutes from nothing, where `make install` (torch,
# Triton, JupyterLab) takes many more. The test suite builds the site with .venv, which has the
# same packages.
SITE_DIR ?= build/site
SITE_STAMP := $(SITE_VENV)/.installed-site

$(SITE_STAMP): pyproject.toml Makefile requirements/cpu.txt | $(SITE_VPY)
	@echo ">>> installing the site extra into $(SITE_VENV)"
	@if $(SITE_VPY) -c '$(LOCK_FITS)'; then \
	  echo "$(SITE_VPY) -m pip install -c requirements/cpu.txt $$($(SITE_VPY) site/build.py --requirements | tr '\n' ' ')"; \
	  $(SITE_VPY) -m pip install -c requirements/cpu.txt $$($(SITE_VPY) site/build.py --requirements); \
	else \
	  echo "WARNING: requirements/cpu.txt is for CPython $(LOCK_PYTHON) on Linux x86-64:" \
	       "installing the site extra's pins with the newest versions of what they need"; \
	  $(SITE_VPY) -m pip install $$($(SITE_VPY) site/build.py --requirements); \
	fi
	@touch $@

site: $(SITE_STAMP)
	$(SITE_VPY) site/build.py --out $(SITE_DIR)

## bench: run each benchmarks/bench_*.py script in turn
bench: install
	@if [ -z "$(BENCHMARKS)" ]; then echo "no benchmarks/bench_*.py scripts yet"; fi
	@set -e; for script in $(BENCHMARKS); do \
	  echo ">>> $$script"; $(VPY) $$script; done

## gpu-compile: every kernel of the course compiled for sm_90 / sm_80 with Triton's own ptxas, no GPU
# needed (nbhelpers/tooling/compile_cases.py; README, "Compiling for a GPU without one"). Writes
# benchmarks/results/compile_check.json, which chapter 09 reads; fails on a compile error, on
# shared memory over a block's limit, or on a spill in a default config.
# GPU_COMPILE_ARGS="--kernels matmul --cold" narrows it or measures cold compile times.
GPU_COMPILE_ARGS ?=
.PHONY: gpu-compile
gpu-compile: install
	$(VPY) -m nbhelpers.tooling.compile_cases $(GPU_COMPILE_ARGS)

## gpu-targets: which GPU runs which chapter (nbhelpers/tooling/gpu_targets.py; docs/gpu.md): each launch a chapter
# makes on a GPU compiled for sm_75 (T4), sm_80 (A100), sm_89 (L4) and sm_90 (H100) with Triton's own ptxas,
# no GPU needed. Writes benchmarks/results/compile_targets.json and the tables of docs/gpu.md.
# GPU_TARGETS_ARGS="--page" only rewrites the tables from the results file.
GPU_TARGETS_ARGS ?=
.PHONY: gpu-targets
gpu-targets: install
	$(VPY) -m nbhelpers.tooling.gpu_targets $(GPU_TARGETS_ARGS)

## gpu-report: the one prepared GPU run (benchmarks/gpu_report.py; README, "Benchmarks").
# It installs nothing, so it runs with the torch and Triton the machine already has: .venv's
# Python when there is a .venv, else python3 (override: GPU_PYTHON=...). Without a GPU it
# prints its plan and stops with exit code 2. Extra arguments: GPU_REPORT_ARGS="--steps kernels".
GPU_PYTHON      ?= $(if $(wildcard $(VPY)),$(VPY),python3)
GPU_REPORT_ARGS ?=
# `make --dry-run gpu-report` (or -n) prints the report's own plan with each step's expected time:
# the recipe runs under -n too (the leading +) and passes --dry-run, so nothing is measured.
GPU_REPORT_DRY := $(if $(findstring n,$(firstword -$(MAKEFLAGS))),--dry-run)
.PHONY: gpu-report
gpu-report:
	+$(GPU_PYTHON) benchmarks/gpu_report.py --python $(GPU_PYTHON) $(GPU_REPORT_DRY) $(GPU_REPORT_ARGS)

## clean: delete the virtual environment and caches (not results files)
clean:
	rm -rf .venv .venv-newest .venv-lowest .venv-site .pytest_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
	find . -name .ipynb_checkpoints -type d -prune -not -path './.git/*' -exec rm -rf {} +
