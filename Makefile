# One target per chore. Everything installs into .venv from pyproject.toml.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: serve test check bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## Start the service on the built-in digits model (http://127.0.0.1:8000/docs).
serve: $(STAMP)
	$(BIN)/inferpool serve

## Run the test suite (unit, concurrency and real-server tests).
test: $(STAMP)
	$(BIN)/pytest

## Lint, format check and type check.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## Engine micro-benchmarks (pool borrow/return, hand-off); figures go to docs/BENCHMARKS.md.
bench: $(STAMP)
	$(BIN)/python -m loadtest.bench_pool
	$(BIN)/python -m loadtest.bench_handoff

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
