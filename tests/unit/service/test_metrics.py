"""Metric buckets from the configuration, on a Metrics object alone."""

from __future__ import annotations

from inferpool.config import load_settings
from inferpool.service.telemetry.metrics import Inference, Metrics, batch_buckets, duration_buckets


def test_buckets_reach_the_largest_call_and_past_the_deadline():
    settings = load_settings(None, ["--runtime.max-request-samples", "3000", "--request-timeout-ms", "60000"])
    metrics = Metrics.for_settings(settings)
    metrics.observe_inference(Inference("m", 0.0, 0.0, 0.0, 0.0, batch_size=3000))
    metrics.observe_request("/predict", 504, 90.0, None)
    text = metrics.render().decode()
    assert 'inferpool_batch_size_bucket{le="4096.0",model="m",version=""} 1.0' in text
    assert 'inferpool_batch_size_bucket{le="2048.0",model="m",version=""} 0.0' in text
    assert 'inferpool_request_duration_seconds_bucket{le="120.0",route="/predict"} 1.0' in text
    assert 'inferpool_request_duration_seconds_bucket{le="60.0",route="/predict"} 0.0' in text
    # Without a configuration: the built-in buckets.
    assert batch_buckets(512)[-1] == 512
    assert duration_buckets((0.1, 1.0), 0) == (0.1, 1.0)
    assert duration_buckets((0.1, 100.0), 30_000) == (0.1, 100.0, 150.0)
