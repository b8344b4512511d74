# The two commands of the README: `make study` and `make test` (`make check`: its fast
# lane); `make lock` rewrites the locks.
VENV ?= .venv
CORES ?= all
PYTHON ?= python3
BIN := $(abspath $(VENV))/bin
# Stages run `python`: put the venv first on PATH for every recipe.
export PATH := $(BIN):$(PATH)

.PHONY: help study test check lint setup setup-dev gpu-check gpu-tests gpu-wheels gpu-lease lock clean
.DEFAULT_GOAL := help

# The locks: every package with its exact version and hashes, for CPython 3.11 on Linux
# x86_64 (glibc >= 2.28). make study installs LOCK, make test DEV_LOCK (a superset).
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
LOCK_PYTHON := 3.11

# WHEELS=dir, for a GPU machine without a package index: the venv sees the machine's own
# torch (system site-packages) and pip installs the rest from the wheels in dir only. The
# lock cannot hold there (the machine's torch is not the locked one): requirements.txt's
# bounds are installed instead, and the report lists every version that differs.
WHEELS ?=
PIP_SOURCE := $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)),)
# What the wheels are for (make gpu-wheels writes it): all of requirements.txt, or with
# PART=measure what `snakemake measure` needs.
WHEELS_REQUIREMENTS = $(or $(wildcard $(WHEELS)/requirements.txt),requirements.txt)

# The venv. With WHEELS it also sees the packages of the PYTHON that made it: a GPU
# image's python is often a venv itself, whose packages --system-site-packages misses.
$(BIN)/python:
	$(PYTHON) -m venv $(if $(WHEELS),--system-site-packages,) $(VENV)
	$(if $(WHEELS),$(PYTHON) -c '$(HOST_SITE_PTH)' "$$($(BIN)/python -c '$(PURELIB)')",)

HOST_SITE_PTH := import site, sys; print(*site.getsitepackages(), sep="\n", \
	file=open(sys.argv[1] + "/host-site-packages.pth", "w"))
PURELIB := import sysconfig; print(sysconfig.get_path("purelib"))

$(VENV)/.runtime: requirements.txt $(LOCK) $(BIN)/python
	@$(BIN)/python -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(LOCK_PYTHON)")' || echo \
		"setup: warning: the lock is for Python $(LOCK_PYTHON), not this $$($(BIN)/python -V)" >&2
	$(if $(WHEELS),,$(BIN)/python -m pip install -q --upgrade pip)
	$(if $(WHEELS),@echo "setup: WHEELS mode: $(LOCK) is not applied (the machine's own torch)",)
	$(BIN)/python -m pip install -q $(if $(WHEELS),$(PIP_SOURCE) -r $(WHEELS_REQUIREMENTS),--require-hashes -r $(LOCK))
	touch $@

$(VENV)/.dev: requirements-dev.txt $(DEV_LOCK) $(VENV)/.runtime
	$(BIN)/python -m pip install -q $(if $(WHEELS),$(PIP_SOURCE) -r requirements-dev.txt,--require-hashes -r $(DEV_LOCK))
	touch $@

# The package itself (workflow/scripts/dnnroofline), editable, from pyproject.toml, with
# the lock's setuptools. With WHEELS the venv's setuptools may be too old to build an
# editable wheel and there is no index: the same path file that install writes instead.
# The stage scripts need neither: they find the package as their sibling folder.
# Its bytecode is compiled here once: every job imports the package in a new Python, and
# where PYTHONDONTWRITEBYTECODE is set (as on this project's hosts) each compiled it
# again (about 0.2 s of CPU a job). An edited module is compiled afresh, as before.
$(VENV)/.package: pyproject.toml $(VENV)/.runtime
	$(if $(WHEELS),echo "$(CURDIR)/workflow/scripts" > "$$($(BIN)/python -c '$(PURELIB)')/dnnroofline.pth",$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .)
	$(BIN)/python -m compileall -q workflow/scripts > /dev/null
	touch $@

## The default study on this machine, ending in results/report.html and the study at a
## glance on the terminal.
study: setup
	snakemake --cores $(CORES)
	snakemake --report results/report.html
	@python workflow/scripts/summarize_study.py
	@echo "Report: results/report.html"

## The whole test suite, on TEST_WORKERS processes (tests/conftest.py sends each file, and
## the tiny study's users together, to one worker).
TEST_WORKERS ?= 2
test: setup-dev
	python -m pytest -q -n $(TEST_WORKERS)

## The fast lane, before a commit (under 3 minutes on a 2-core host): make lint, then the
## unit and script tests on TEST_WORKERS processes, leaving out those that run the
## workflow or a real study, start Slurm, open a browser or build code or a venv (pytest
## markers workflow, slurm, browser, build). make test runs them all.
CHECK_TESTS := not (workflow or slurm or browser or build)
check: lint
	python -m pytest -q -n $(TEST_WORKERS) -m "$(CHECK_TESTS)"

## Quality gates (also run by the test suite).
lint: setup-dev
	snakemake --lint
	snakefmt --check .
	ruff check .
	ruff format --check .

## On an NVIDIA machine: counter self-test, ceilings, a small GPU study with ncu, the
## report and a summary table (config/gpu_check.yaml), then the CUDA tests (a skip fails
## them there). Without a GPU: one line, exit 0.
gpu-check:
	@if python3 scripts/gpu_check.py detect; then \
		$(MAKE) --no-print-directory setup WHEELS="$(WHEELS)" && \
		python scripts/gpu_check.py run --cores $(CORES) && \
		$(MAKE) --no-print-directory gpu-tests WHEELS="$(WHEELS)"; \
	fi

# The tests marked cuda, with REQUIRE_CUDA=1 (tests/require_cuda.py): on a GPU machine a
# skipped CUDA test is a CPU-only torch or a missing driver, so it fails. With WHEELS only
# where the wheels brought the test tools (make gpu-wheels brings requirements.txt's).
gpu-tests:
	@if [ -z "$(WHEELS)" ] || $(BIN)/python -c 'import pytest, xdist' 2>/dev/null; then \
		$(MAKE) --no-print-directory setup-dev WHEELS="$(WHEELS)" && \
		REQUIRE_CUDA=1 python -m pytest -q -n $(TEST_WORKERS) -m cuda; \
	else echo "gpu-check: no pytest in this venv (WHEELS): the CUDA tests are not run"; fi

## For a GPU machine without a package index: the wheels that make gpu-check WHEELS=dir
## (or make setup WHEELS=dir) installs there, at the locked versions, for its Python
## (GPU_PYTHON) on x86_64 Linux: not the torch stack (the machine's own), nor what
## INSTALLED (its pip freeze) has at a version that meets every bound. PART=measure: only
## what `snakemake measure` needs (measure there, analyse and report elsewhere).
GPU_PYTHON ?= $(LOCK_PYTHON)
INSTALLED ?=
PART ?= all
gpu-wheels:
	$(PYTHON) scripts/gpu_check.py wheels --dest $(or $(WHEELS),wheels) --lock $(LOCK) \
		--python-version $(GPU_PYTHON) --part $(PART) $(if $(INSTALLED),--installed $(INSTALLED),)

## A short GPU allocation (a lent machine, a cluster job): PLAN's groups of targets, most
## valuable first, within BUDGET_S seconds; a group is cut at the deadline, and after each
## the measured envs' results/ go into OUT (results.tar.gz, lease.json, lease.log).
## CONFIG: the config files, in place of config/config.yaml (docs/gpu.md).
CONFIG ?= config/config.yaml config/gpu_check.yaml
PLAN ?=
BUDGET_S ?= 600
OUT ?= results/lease
gpu-lease:
	@test -n "$(PLAN)" || { echo "gpu-lease: give PLAN=plan.yaml (docs/gpu.md)" >&2; exit 2; }
	@$(MAKE) --no-print-directory setup WHEELS="$(WHEELS)"
	python scripts/gpu_lease.py --plan $(PLAN) --budget-s $(BUDGET_S) --out $(OUT) \
		--configfile $(CONFIG) --cores $(CORES)

## The venv with the study's packages (requirements.lock) and the package, editable.
setup: $(VENV)/.runtime $(VENV)/.package
## The venv with the test tools too (requirements-dev.lock).
setup-dev: $(VENV)/.dev $(VENV)/.package

## This list: each target and what it does.
help:
	@awk '/^## / { if (!block) doc = ""; doc = doc "\n    " substr($$0, 4); block = 1; next } \
		{ block = 0 } /^[a-z-]+:/ && doc { sub(/:.*/, ""); print "make " $$0 doc; doc = "" }' \
		$(firstword $(MAKEFILE_LIST))

## Rewrite the locks after a change to requirements*.txt or lock-constraints.txt. Pins
## that still fit are kept; UPGRADE=1 moves every package to its newest allowed release.
## uv (pinned, in LOCK_TOOLS) resolves against PyPI and ignores this machine's pip config.
UV_VERSION := 0.13.9
LOCK_TOOLS ?= .lock-tools
UV := $(LOCK_TOOLS)/bin/uv
UV_COMPILE = $(UV) pip compile --quiet --generate-hashes --python-version $(LOCK_PYTHON) \
	--python-platform x86_64-manylinux_2_28 -c lock-constraints.txt \
	--custom-compile-command "make lock" $(if $(UPGRADE),--upgrade,)

$(UV):
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install -q uv==$(UV_VERSION)

lock: $(UV)
	$(UV_COMPILE) requirements.txt -o $(LOCK)
	$(UV_COMPILE) requirements-dev.txt -c $(LOCK) -o $(DEV_LOCK)

## Remove results/ and .snakemake/ (Snakemake's records); the venv stays.
clean:
	rm -rf results .snakemake
