# The two commands of the README: `make study` and `make test`.
VENV ?= .venv
CORES ?= all
BIN := $(abspath $(VENV))/bin
# Stages run `python`: put the venv first on PATH for every recipe.
export PATH := $(BIN):$(PATH)

.PHONY: study test lint setup setup-dev gpu-check clean

# WHEELS=dir, for a GPU machine without a package index: the venv sees the machine's own
# torch (system site-packages) and pip installs the rest from the wheels in dir only.
WHEELS ?=
PIP_SOURCE := $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)),)

$(VENV)/.runtime: requirements.txt
	python3 -m venv $(if $(WHEELS),--system-site-packages,) $(VENV)
	$(if $(WHEELS),,$(BIN)/python -m pip install -q --upgrade pip)
	$(BIN)/python -m pip install -q $(PIP_SOURCE) -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.runtime
setup-dev: $(VENV)/.dev

## The default study on this machine, ending in results/report.html.
study: setup
	snakemake --cores $(CORES)
	snakemake --report results/report.html
	@echo "Report: results/report.html"

## On an NVIDIA machine: counter self-test, ceilings, a small GPU study with ncu, the
## report and a summary table (config/gpu_check.yaml). Without a GPU: one line, exit 0.
gpu-check:
	@if python3 scripts/gpu_check.py detect; then \
		$(MAKE) --no-print-directory setup WHEELS="$(WHEELS)" && \
		python scripts/gpu_check.py run --cores $(CORES); \
	fi

## The whole test suite.
test: setup-dev
	python -m pytest -q

## Quality gates (also run by the test suite).
lint: setup-dev
	snakemake --lint
	snakefmt --check .
	ruff check .
	ruff format --check .

clean:
	rm -rf results .snakemake
