# One target per chore. Everything installs into .venv from pyproject.toml.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
SERVE_STAMP := $(VENV)/.installed-core
PROMTOOL := $(BIN)/promtool
PROMETHEUS := $(BIN)/prometheus
# The KServe SDK pins its own FastAPI/httpx stack: it gets a venv of its own for the v2 client test.
KSERVE_PYTHON := .venv-kserve/bin/python
# Triton Inference Server 2.51 (the nvidia-pytriton wheel: tritonserver and its Python backend), the
# anchor of loadtest.compare's digits table: a venv of its own, since its backend's stub needs numpy<2.
TRITON_PYTHON := .venv-triton/bin/python

.PHONY: serve test test-unit test-integration test-e2e test-image check bench proto clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Serving needs only the core dependencies (no test tools, no MiniLM or ONNX extras).
$(SERVE_STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e .
	touch $(SERVE_STAMP)

## Start the service on the built-in digits model (http://127.0.0.1:8000/docs).
serve: $(SERVE_STAMP)
	$(BIN)/inferpool serve

# promtool lints /metrics and unit-tests deploy/monitoring/alerts.yaml; the prometheus server
# evaluates the dashboard's queries against a real scrape (tests/e2e/deploy/test_dashboard.py).
# Debian's prometheus package ships both: only the binaries are extracted (no daemon is installed).
$(PROMTOOL) $(PROMETHEUS) &: | $(STAMP)
	tmp=$$(mktemp -d) && cd $$tmp && chmod 777 $$tmp && \
	  { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus; }; } && \
	  dpkg-deb -x prometheus_*.deb x && cp x/usr/bin/promtool $(abspath $(PROMTOOL)) && \
	  cp x/usr/bin/prometheus $(abspath $(PROMETHEUS)) && rm -rf $$tmp

$(KSERVE_PYTHON):
	python3 -m venv .venv-kserve
	.venv-kserve/bin/python -m pip install --quiet 'kserve>=0.15,<1'

## Triton's venv for `python -m loadtest.compare` (its Triton row) and tests/e2e/loadtest/test_triton_peer.py.
$(TRITON_PYTHON):
	python3 -m venv .venv-triton
	.venv-triton/bin/python -m pip install --quiet 'nvidia-pytriton==0.7.0' 'numpy<2' 'onnxruntime>=1.31'
.venv-triton: $(TRITON_PYTHON)

## Run the whole test suite: tests/unit, tests/integration, then tests/e2e (see README.md).
test: $(STAMP) $(PROMTOOL) $(PROMETHEUS) $(KSERVE_PYTHON) $(TRITON_PYTHON)
	$(BIN)/pytest

## No server, no app: functions, engine objects, codec, settings, CLI parsing (a few minutes).
test-unit: $(STAMP) $(PROMTOOL) $(KSERVE_PYTHON)
	$(BIN)/pytest tests/unit

## The FastAPI app in-process (TestClient).
test-integration: $(STAMP)
	$(BIN)/pytest tests/integration

## Real server subprocesses, the Dockerfile replay, CLI commands as processes (10-15 minutes).
test-e2e: $(STAMP) $(PROMTOOL) $(PROMETHEUS) $(KSERVE_PYTHON) $(TRITON_PYTHON)
	$(BIN)/pytest tests/e2e

## The image for real: a Docker engine (installed and started when missing), a local base image
## without any registry, the image from the unchanged Dockerfile, tests/e2e/deploy/test_container.py
## against it; the dockerd it started is stopped again (docs/deploy.md, .ci/image.py). Root only.
test-image: $(STAMP)
	$(BIN)/python .ci/image.py up
	status=0; $(BIN)/python .ci/image.py build && INFERPOOL_IMAGE_TESTS=1 $(BIN)/pytest tests/e2e/deploy/test_container.py || status=$$?; \
	  $(BIN)/python .ci/image.py down; exit $$status

## Lint, format check and type check.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## Engine micro-benchmarks (pool borrow/return, hand-off); figures go to docs/BENCHMARKS.md.
## Every kept experiment: `python -m loadtest.bench --list`.
bench: $(STAMP)
	$(BIN)/python -m loadtest.bench pool
	$(BIN)/python -m loadtest.bench handoff

## Regenerate the gRPC message module from service/grpc/inference.proto (commit both).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. inferpool/service/grpc/inference.proto

clean:
	rm -rf $(VENV) .venv-kserve .venv-triton .pytest_cache .mypy_cache .ruff_cache *.egg-info
