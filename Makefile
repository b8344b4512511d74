# The two commands of the README: `make study` and `make test`.
VENV ?= .venv
CORES ?= all
BIN := $(abspath $(VENV))/bin
# Stages run `python`: put the venv first on PATH for every recipe.
export PATH := $(BIN):$(PATH)

.PHONY: study test lint setup setup-dev clean

$(VENV)/.runtime: requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
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
