# goondan: every target has a "## help" line; `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE ?= bundles/examples/hello/goondan.yaml
EXAMPLE_INPUT ?= Hello, goondan!

.PHONY: help install test lint typecheck imports bench run-example clean fuzz chaos soak

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python ## create .venv and install goondan with the dev extras
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@echo "installed: $$($(BIN)/goondan --version)"

test: ## run the unit and integration tests (real processes, real sockets)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: ## ruff, mypy --strict and the import contracts of ARCHITECTURE.md §2
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/layering

typecheck: ## mypy --strict only
	$(BIN)/mypy

bench: ## run the benchmarks; each figure is printed as a ratio to a raw baseline of the same run
	$(BIN)/python -m tests.bench

fuzz: ## long fuzz runs: frames at the daemon's sockets, hostile tool args, bundles (FUZZ_EXAMPLES)
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-2000} FUZZ_EXAMPLES_TOOLS=$${FUZZ_EXAMPLES_TOOLS:-300} \
	FUZZ_BUNDLE_EXAMPLES=$${FUZZ_BUNDLE_EXAMPLES:-2000} $(BIN)/python -m pytest -q -s -p no:cacheprovider \
		tests/fuzz tests/unit/bundles/test_fuzz.py tests/unit/protocol/test_codec.py $(PYTEST_ARGS)

chaos: ## long chaos run: SIGKILL monkey under inter-agent load (CHAOS_SECONDS, default 120)
	CHAOS_SECONDS=$${CHAOS_SECONDS:-120} $(BIN)/python -m pytest -q -s -p no:cacheprovider \
		tests/chaos $(PYTEST_ARGS)

soak: ## steady traffic; fails on sustained RSS growth (SOAK_SECONDS, default 60)
	SOAK_SECONDS=$${SOAK_SECONDS:-60} $(BIN)/python -m pytest -q -s -p no:cacheprovider \
		tests/soak $(PYTEST_ARGS)

run-example: ## run bundles/examples/hello offline through the real daemon and print the reply
	$(BIN)/goondan run $(EXAMPLE) --input "$(EXAMPLE_INPUT)"

clean: ## remove caches (keeps .venv)
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
