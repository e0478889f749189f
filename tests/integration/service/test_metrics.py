"""Metrics, timing headers and request ids, in-process."""

from __future__ import annotations

import re

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.service.conftest import app_client
from tests.support.fault_models import POISON


@pytest.fixture(scope="module")
def faulty():
    with app_client(
        "--model", "tests.support.fault_models:raising", "--runtime.backend", "eager", "--max-body-bytes", "4096"
    ) as client:
        yield client


def scrape(client) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (a config model's per-model
    series also carry ``version=""``)."""
    return sum(v for (n, found), v in samples.items() if n == name and labels.items() <= dict(found).items())


def timings(response) -> dict[str, float]:
    return {m[0]: float(m[1]) / 1e3 for m in re.findall(r"(\w+);dur=([\d.]+)", response.headers["server-timing"])}


def test_counts_and_phase_sums_follow_the_requests(faulty, images):
    before = scrape(faulty)
    headers = [timings(faulty.post("/predict", json={"inputs": images[i].tolist()})) for i in range(10)]
    after = scrape(faulty)

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("inferpool_requests_total", route="/predict", status="200") == 10
    assert grew("inferpool_inference_seconds_count", model="digits") == 10
    assert grew("inferpool_batch_size_sum", model="digits") == 10
    # The histograms and the headers come from the same clock readings (headers in rounded ms).
    for phase, metric in (("inference", "inference"), ("queue", "queue_wait"), ("decode", "decode")):
        header_sum = sum(h[phase] for h in headers)
        assert grew(f"inferpool_{metric}_seconds_sum", model="digits") == pytest.approx(header_sum, abs=1e-5 * 10)
    end_to_end = grew("inferpool_request_duration_seconds_sum", route="/predict")
    assert end_to_end >= sum(h["total"] for h in headers) - 1e-5 * 10
    overhead = grew("inferpool_server_overhead_seconds_sum", model="digits")
    assert overhead == pytest.approx(end_to_end - grew("inferpool_inference_seconds_sum", model="digits"), rel=1e-6)
    assert all(h["total"] >= h["inference"] + h["queue"] for h in headers)


def test_rejections_and_failures_are_counted_by_reason(faulty, images):
    before = scrape(faulty)
    faulty.post("/predict", content=b"[" + b"0," * 4000 + b"0]")
    faulty.post("/predict", content=b"{oops")
    faulty.post("/predict", json={"inputs": [[1.0]]})
    after = scrape(faulty)
    assert (
        value(after, "inferpool_rejections_total", reason="body_too_large")
        - value(before, "inferpool_rejections_total", reason="body_too_large")
        == 1
    )
    for reason in ("invalid_json", "invalid_input"):
        assert (
            value(after, "inferpool_failures_total", reason=reason)
            - value(before, "inferpool_failures_total", reason=reason)
            == 1
        )


def test_a_model_that_raises_gets_a_clean_500_and_the_pool_survives(faulty, images, caplog):
    poisoned = np.full((1, 8, 8), POISON).tolist()
    before = scrape(faulty)
    response = faulty.post("/predict", json={"inputs": poisoned}, headers={"X-Request-Id": "fault-1"})
    assert response.status_code == 500
    assert response.json() == {"error": "the model failed on this input (RuntimeError); the server log has the details"}
    assert response.headers["x-request-id"] == "fault-1"
    assert "poisoned input" in caplog.text  # the traceback went to the log, once
    assert caplog.text.count("Traceback") == 1
    after = scrape(faulty)
    assert (
        value(after, "inferpool_failures_total", reason="model_error")
        - value(before, "inferpool_failures_total", reason="model_error")
        == 1
    )
    assert value(after, "inferpool_runtimes_idle", model="digits") == value(after, "inferpool_runtimes", model="digits")
    assert (
        value(after, "inferpool_runtime_replacements_total", model="digits")
        - value(before, "inferpool_runtime_replacements_total", model="digits")
        == 1
    )  # the runtime that raised was rebuilt from the shared module
    assert faulty.get("/health/ready").status_code == 200
    assert faulty.post("/predict", json={"inputs": images[0].tolist()}).status_code == 200


def test_request_ids_are_echoed_or_generated(faulty, images):
    given = faulty.post("/predict", json={"inputs": images[0].tolist()}, headers={"X-Request-Id": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    first = faulty.get("/health/live").headers["x-request-id"]
    second = faulty.get("/health/live").headers["x-request-id"]
    assert first
    assert second
    assert first != second
    too_long = faulty.get("/health/live", headers={"X-Request-Id": "x" * 500}).headers["x-request-id"]
    assert too_long != "x" * 500


def test_pool_gauges_and_info(faulty):
    samples = scrape(faulty)
    assert value(samples, "inferpool_runtimes", model="digits") == 2
    assert value(samples, "inferpool_threads", model="digits") == 2
    assert value(samples, "inferpool_inflight_requests", model="digits") == 0
    assert value(samples, "inferpool_queue_depth", model="digits") == 0
    info = [labels for (name, labels) in samples if name == "inferpool_build_info"]
    assert len(info) == 1
    assert dict(info[0])["backend"] == "eager"
    assert dict(info[0])["precision"] == "fp32"  # auto: the digits CNN's call is far under 1 ms
    assert dict(info[0])["torch_version"].startswith("2.13")


def test_latency_buckets_come_from_the_config(images):
    with app_client("--latency-buckets", "[0.002, 0.02, 0.2]") as client:
        client.post("/predict", json={"inputs": images[0].tolist()})
        text = client.get("/metrics").text
    assert 'inferpool_request_duration_seconds_bucket{le="0.02",route="/predict"}' in text
    assert 'le="5e-05",route="/predict"' not in text


def test_401s_are_counted_under_their_route(monkeypatch, images):
    monkeypatch.setenv("INFERPOOL_API_KEY", "k3y")
    with app_client("--runtime.backend", "eager") as client:
        assert client.get("/v2/models/digits").status_code == 401
        assert client.post("/v2/models/digits/infer", json={"inputs": []}).status_code == 401
        assert client.post("/predict", json={"inputs": images[0].tolist()}).status_code == 401
        assert client.delete("/predict").status_code == 401  # the path's route, another method
        assert client.get("/no/such/path").status_code == 401
        samples = scrape(client)
    for route in ("/v2/models/{name}", "/v2/models/{name}/infer", "unmatched"):
        assert value(samples, "inferpool_requests_total", route=route, status="401") == 1
    assert value(samples, "inferpool_requests_total", route="/predict", status="401") == 2
