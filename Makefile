# Makefile for the low-precision numerics course.
#
#   make lab        set up .venv (if needed) and open JupyterLab at the repo root
#   make test       set up .venv (if needed) and run every test: unit tests + nbval
#   make exercises  regenerate exercises/ from solutions/
#   make site       build the course website into build/site/html (nothing is executed)
#   make bench      run the benchmark scripts in benchmarks/
#   make gpu-report on an NVIDIA GPU: kernel tests compiled, every benchmarks/gpu_*.py, nbval; one summary
#   make clean      delete .venv and caches
#
# Variables you may override on the command line:
#   PYTHON=python3.11   interpreter used to create .venv (must be >= 3.10)
#   DEVICE=cpu|gpu      which PyTorch build to install (default: auto-detect)
#   TORCH_CPU_INDEX=... where the CPU-only PyTorch wheels come from
#   LAB_ARGS="--no-browser --port 8899"   extra arguments for `jupyter lab`
#   PYTEST_ARGS="-x -k formats"           extra arguments for pytest

# Version pins. torch and triton move together: PyPI's CUDA build of torch 2.13.0
# requires exactly triton 3.7.1. On a CPU machine we install the CPU-only torch
# wheel (which does not pull triton) and add the same triton by hand, so that the
# Triton kernels run in the interpreter (TRITON_INTERPRET=1) with the same Triton
# version a GPU machine compiles them with. environment.yml repeats these pins
# (tests/test_repo_setup.py checks they agree).
TORCH_VERSION  := 2.13.0
TRITON_VERSION := 3.7.1

PYTHON          ?= python3
DEVICE          ?= auto
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
LAB_ARGS        ?=
PYTEST_ARGS     ?=

VENV    := .venv
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

BENCHMARKS := $(sort $(wildcard benchmarks/bench_*.py))

.PHONY: venv install lab test exercises site bench clean

## venv: create .venv with $(PYTHON) unless it exists
venv: $(VPY)

$(VPY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: '$(PYTHON)' not found; run e.g.: make PYTHON=python3.11 $(MAKECMDGOALS)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { \
	  echo "error: this course needs Python >= 3.10, but '$(PYTHON)' is $$($(PYTHON) --version 2>&1)."; \
	  echo "       Install a newer Python and run e.g.: make PYTHON=python3.11 $(MAKECMDGOALS)"; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV)

## install: everything the notebooks and tests need, into .venv (idempotent)
install: $(STAMP)

$(STAMP): pyproject.toml Makefile | $(VPY)
	@echo ">>> installing into $(VENV) for DEVICE=$(TORCH_DEVICE)"
	$(VPIP) install --upgrade pip
ifeq ($(TORCH_DEVICE),gpu)
	@# A CPU wheel (2.13.0+cpu) also satisfies torch==2.13.0; remove it so pip
	@# fetches the CUDA build from PyPI, which brings triton==$(TRITON_VERSION) itself.
	@if $(VPY) -c 'import sys, torch; sys.exit("+cpu" not in torch.__version__)' 2>/dev/null; then \
	  $(VPIP) uninstall -y torch; fi
	$(VPIP) install torch==$(TORCH_VERSION)
else
	@# Only torch itself comes from the CPU index (one look-up there); its
	@# dependencies come from PyPI in the second command.
	$(VPIP) install --no-deps torch==$(TORCH_VERSION) --extra-index-url $(TORCH_CPU_INDEX)
	$(VPIP) install torch==$(TORCH_VERSION)
	@# Triton publishes Linux wheels only; elsewhere (macOS) skip it with a warning:
	@# the notebooks that launch Triton kernels (chapter 03's GEMM on) then cannot run them.
	@if [ "$$(uname -s)" = Linux ]; then \
	  echo "$(VPIP) install triton==$(TRITON_VERSION)"; \
	  $(VPIP) install triton==$(TRITON_VERSION); \
	else \
	  echo "WARNING: no Triton wheels for $$(uname -s); Triton kernels will not run here."; \
	fi
endif
	$(VPIP) install -e '.[lab,test]'
	@# Register the venv's Python as the `python3` kernel inside the venv only
	@# (--sys-prefix), so Jupyter started from .venv runs notebooks with it.
	$(VPY) -m ipykernel install --sys-prefix --name python3 \
	  --display-name 'Python 3 (lowprec-course)'
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo ">>> $(VENV) ready (DEVICE=$(TORCH_DEVICE))"

## lab: open JupyterLab at the repo root (notebooks/, exercises/, solutions/)
# Jupyter refuses to run as root unless told to (containers, CI machines).
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

lab: install
	$(VENV)/bin/jupyter lab $(LAB_ROOT) $(LAB_ARGS)

## test: unit tests + every notebook through nbval
test: install
	$(VPY) -m pytest $(NBVAL_ARGS) $(PYTEST_ARGS) $(TEST_PATHS)

## exercises: regenerate exercises/ from solutions/
exercises: install
	$(VPY) -m nbhelpers.make_exercises

## site: the course website from the committed notebooks, into $(SITE_DIR)/html (README, "The website")
SITE_DIR ?= build/site

site: install
	$(VPY) site/build.py --out $(SITE_DIR)

## bench: run each benchmarks/bench_*.py script in turn
bench: install
	@if [ -z "$(BENCHMARKS)" ]; then echo "no benchmarks/bench_*.py scripts yet"; fi
	@set -e; for script in $(BENCHMARKS); do \
	  echo ">>> $$script"; $(VPY) $$script; done

## gpu-report: the one prepared GPU run (benchmarks/gpu_report.py; README, "Benchmarks").
# It installs nothing, so it runs with the torch and Triton the machine already has: .venv's
# Python when there is a .venv, else python3 (override: GPU_PYTHON=...). Without a GPU it
# prints its plan and stops with exit code 2. Extra arguments: GPU_REPORT_ARGS="--steps kernels".
GPU_PYTHON      ?= $(if $(wildcard $(VPY)),$(VPY),python3)
GPU_REPORT_ARGS ?=
.PHONY: gpu-report
gpu-report:
	$(GPU_PYTHON) benchmarks/gpu_report.py --python $(GPU_PYTHON) $(GPU_REPORT_ARGS)

## clean: delete the virtual environment and caches (not results files)
clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
	find . -name .ipynb_checkpoints -type d -prune -not -path './.git/*' -exec rm -rf {} +
