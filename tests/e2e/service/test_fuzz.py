"""Fuzz every route from the service's own OpenAPI spec with the schemathesis CLI, against the
real server, on the digits and the MiniLM configs.

Every check is on, the data-acceptance ones included: what the spec accepts must be answered
2xx, what it rejects 4xx, and every answer must match its documented status, headers and
schema. Examples, coverage (boundary values and each way to break them), fuzzing and stateful
phases all run; path parameters come from the spec, which lists the served models and
versions. tests/e2e/service/fuzz_hooks.py and schemathesis.toml say what the spec cannot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import jsonschema  # type: ignore[import-untyped]  # schemathesis brings it, without stubs
import pytest

from inferpool.harness.server import REPO_ROOT, run_server, wait_ready
from tests.support.text_models import MODELS as TEXT_MODELS

HERE = Path(__file__).resolve().parent
SCHEMATHESIS = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
API_KEY = "fuzz-key"
# Per operation and phase: ~3,700 requests, about 75 s for both configs on a shared 2-core
# machine (the CI budget is three minutes). Raise it locally (INFERPOOL_FUZZ_EXAMPLES) to dig.
MAX_EXAMPLES = int(os.environ.get("INFERPOOL_FUZZ_EXAMPLES", "20"))
SEED = os.environ.get("INFERPOOL_FUZZ_SEED", "16")  # fixed, so that CI is repeatable
# max_request_samples bounds the batch sizes the spec lists one by one (service/http/openapi.py).
CONFIGS: dict[str, tuple[str, ...]] = {
    "digits": ("--runtime.backend", "eager", "--max-body-bytes", "65536", "--runtime.max-request-samples", "8"),
    "minilm": ("--config", str(REPO_ROOT / "config" / "minilm.toml"), "--runtime.max-request-samples", "8"),
    "text": ("--models", TEXT_MODELS),
}
# The tiny text models (tests/support/text_models.py) stand in for real ones on the text routes only:
# their /predict and v2 shapes are test doubles', not the product's.
ONLY: dict[str, tuple[str, ...]] = {
    "text": (
        "--include-path-regex",
        "^/(embed|rerank|tokenize|classify|v1/classify|v1/rerank|v2/rerank|v1/embeddings)$",
    ),
}
LEAST_OPERATIONS = {"digits": 19, "minilm": 19, "text": 8}  # the text routes and /v1 among them
KEYED = {"digits"}  # served with an API key: the spec declares it, and ignored_auth checks it
# One sample and a batch: the answer's shape differs (MiniLM: one embedding, or a list of them).
ONE_AND_MANY: dict[str, tuple[object, object]] = {
    "digits": ([[[0.0] * 8] * 8], [[[[0.0] * 8] * 8]] * 2),
    "minilm": ("A sentence.", ["One sentence.", "Another one."]),
}


def _answer_schema(spec: dict, path: str, status: str = "200") -> dict:
    return spec["paths"][path]["post"]["responses"][status]["content"]["application/json"]["schema"]


def check_answers_conform(url: str, config: str, headers: dict[str, str]) -> None:
    """Said outright, not left to the fuzzer's luck: both /predict answers fit the spec, and so
    do /v1/embeddings' in both encodings (MiniLM) or its 404 (no text-embedding model served)."""
    spec = httpx2.get(url + "/openapi.json", timeout=10).json()
    if config == "text":
        check_text_answers_conform(url, spec)
        return
    schema = _answer_schema(spec, "/predict")
    for inputs in ONE_AND_MANY[config]:
        answer = httpx2.post(url + "/predict", json={"inputs": inputs}, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
        jsonschema.validate(answer.json(), schema, cls=jsonschema.Draft202012Validator)
    status = "200" if config == "minilm" else "404"
    for encoding in ("float", "base64"):
        body = {"model": config, "input": ["One sentence.", "Another one."], "encoding_format": encoding}
        answer = httpx2.post(url + "/v1/embeddings", json=body, headers=headers, timeout=60)
        assert answer.status_code == int(status), answer.text
        schema = _answer_schema(spec, "/v1/embeddings", status)
        jsonschema.validate(answer.json(), schema, cls=jsonschema.Draft202012Validator)


TEXT_BODIES: dict[str, dict[str, object]] = {
    "/embed": {"inputs": ["One.", "Two."], "model": "tiny-embed"},
    "/rerank": {"query": "One?", "texts": ["One.", "Two."], "return_text": True},
    "/tokenize": {"inputs": "One, two.", "model": "tiny-rerank"},
    "/v1/rerank": {"query": "One?", "documents": ["One.", {"text": "Two."}], "return_documents": True},
    "/v2/rerank": {"model": "tiny-rerank", "query": "One?", "documents": ["One.", "Two."], "top_n": 1},
    "/classify": {"input": ["One.", "Two."]},
    "/v1/classify": {"input": "One.", "raw_scores": True, "model": "tiny-classify"},
}


def check_text_answers_conform(url: str, spec: dict) -> None:
    """Each text route's 200, and a 400 in its API's shape, fit the spec."""
    for path, body in TEXT_BODIES.items():
        answer = httpx2.post(url + path, json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        jsonschema.validate(answer.json(), _answer_schema(spec, path), cls=jsonschema.Draft202012Validator)
        refused = httpx2.post(url + path, json=body | {"unknown": 1}, timeout=60)
        assert refused.status_code == 400, refused.text
        jsonschema.validate(refused.json(), _answer_schema(spec, path, "400"), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("config", CONFIGS)
def test_every_route_answers_within_its_spec(config, tmp_path, capsys, monkeypatch):
    auth: dict[str, str] = {}
    if config in KEYED:
        monkeypatch.setenv("INFERPOOL_API_KEY", API_KEY)
        auth = {"Authorization": f"Bearer {API_KEY}"}
    sent = [arg for name, value in auth.items() for arg in ("-H", f"{name}: {value}")]
    with run_server(tmp_path, *CONFIGS[config], "--workers", "1", ready_timeout=120) as server:
        wait_ready(server, 120)
        check_answers_conform(server.url, config, auth)
        run = subprocess.run(
            [
                SCHEMATHESIS, "--config-file", str(HERE / "schemathesis.toml"),
                "run", server.url + "/openapi.json", *sent, *ONLY.get(config, ()),
                "--checks", "all", "--mode", "all", "--max-examples", str(MAX_EXAMPLES), "--seed", SEED,
                "--workers", "1", "--generation-database", "none", "--continue-on-failure", "--no-color",
            ],
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "SCHEMATHESIS_HOOKS": "tests.e2e.service.fuzz_hooks"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
        assert server.process.poll() is None, "the server must survive the fuzzing"
    report = run.stdout + run.stderr
    tested = re.search(r"Tested: (\d+)", report)
    cases = re.search(r"(\d+) generated", report)
    with capsys.disabled():
        print(f"\nschemathesis on {config}: {cases and cases[1]} cases over {tested and tested[1]} operations")
    assert run.returncode == 0, report[-20000:]
    assert tested is not None, report[-5000:]
    assert int(tested[1]) >= LEAST_OPERATIONS[config], report[-5000:]
