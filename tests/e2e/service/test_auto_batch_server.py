"""A real server, ``max_batch_size`` left at its default (0): a model whose 20 ms calls run on worker
threads and gain from company is served batching up to 8, says so at ``/v2/models/{name}/config``,
and answers many concurrent requests each with eager PyTorch's numbers for its own image, from
calls that carried several of them; the digits model beside it (inline, ~0.1 ms calls) does not."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx2
import numpy as np
import orjson
import pytest

from inferpool.engine.options import AUTO_MAX_BATCH
from inferpool.harness.metrics import metric_total
from inferpool.harness.server import run_server, wait_ready

MODELS = """
model = "inferpool.engine.zoo.digits:build"
[[models]]
source = "tests.support.slow_model:slow_calls"
name = "slow"
runtime = { backend = "eager", precision = "fp32" }  # eager: an exported graph would not keep its time.sleep
"""
CLIENTS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("autobatch")
    config = folder / "models.toml"
    config.write_text(MODELS)
    args = ("--config", str(config), "--workers", "1", "--runtime.compile-cache-dir", str(folder / "cache"))
    with run_server(folder, *args) as running:
        wait_ready(running, timeout=120)
        yield running


def test_a_long_call_model_batches_by_default_and_says_why(server):
    config = httpx2.get(f"{server.url}/v2/models/slow/config", timeout=10).json()
    chosen = config["batch_selection"]
    assert (config["max_batch_size"], config["dispatch"]) == (AUTO_MAX_BATCH, "batch"), chosen
    assert (chosen["configured"], chosen["rule"], chosen["dispatch"]) == (0, "batches", "threads"), chosen
    assert chosen["one_sample_ms"] >= chosen["min_call_ms"], chosen
    assert chosen["batch_gain"] >= chosen["min_gain"], chosen
    assert "batches up to 8" in chosen["reason"]
    assert f"max_batch_size={AUTO_MAX_BATCH} (batches up to 8" in server.output()  # the ready line says it too


def test_digits_beside_it_does_not_batch(server):
    config = httpx2.get(f"{server.url}/v2/models/digits/config", timeout=10).json()
    chosen = config["batch_selection"]
    assert config["max_batch_size"] == 1, chosen
    assert config["dispatch"] != "batch", chosen
    # Inline as measured on an idle machine; were the probe to choose threads, its ~0.1 ms call is short.
    assert chosen["configured"] == 0, chosen
    assert chosen["rule"] in ("inline", "short_call"), chosen


def test_concurrent_requests_each_get_eager_pytorchs_answer_from_shared_calls(server, images, reference):
    probabilities, label = reference(images)
    order = [i % len(images) for i in range(6 * CLIENTS)]

    def ask(image: int) -> dict:
        body = orjson.dumps({"inputs": images[image].tolist()})
        answer = httpx2.post(f"{server.url}/predict/slow", content=body, timeout=30,
                             headers={"Content-Type": "application/json"})  # fmt: skip
        assert answer.status_code == 200, answer.text
        return answer.json()["outputs"]

    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(ask, order))
    for image, outputs in zip(order, answers, strict=True):
        np.testing.assert_allclose(np.ravel(outputs["probabilities"]), probabilities[image], rtol=1e-4, atol=1e-6)
        assert outputs["label"] == int(label[image])
    text = httpx2.get(f"{server.url}/metrics", timeout=10).text
    calls = metric_total(text, "inferpool_batch_size_count", model="slow")
    samples = metric_total(text, "inferpool_batch_size_sum", model="slow")
    assert calls > 0
    assert samples / calls > 1.5, (calls, samples)  # requests shared calls
