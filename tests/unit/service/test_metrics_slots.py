"""The per-request metrics' slots: same output as prometheus-client's own objects, in one
process and across processes (no flush: visible to any scrape as soon as observed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inferpool.harness.metrics import metric_total
from inferpool.service.telemetry import metric_slots
from inferpool.service.telemetry.metrics import LATENCY_BUCKETS, Inference, Metrics

ROOT = Path(__file__).resolve().parents[3]
PROMTOOL = shutil.which("promtool", path=str(Path(sys.executable).parent)) or shutil.which("promtool")
# Values on, between, below and above the bounds, and one far beyond the last.
VALUES = [0.0, 0.000025, 0.00003, 0.0001, 0.0004, 0.00075, 0.003, 0.01, 0.2, 2.5, 10.0, 11.0, 500.0]


def samples(text: str, family: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        if f.name == family
        for s in f.samples
        if not s.name.endswith("_created")
    }


def test_a_histogram_renders_as_prometheus_clients_own():
    metrics = Metrics()
    registry = CollectorRegistry()
    reference = Histogram(
        "inferpool_request_duration_seconds", "x", ["route"], buckets=LATENCY_BUCKETS, registry=registry
    )
    for value in VALUES:
        metrics.observe_request("/predict", 200, value, None)
        reference.labels("/predict").observe(value)
    expected = samples(generate_latest(registry).decode(), "inferpool_request_duration_seconds")
    got = samples(metrics.render().decode(), "inferpool_request_duration_seconds")
    assert got == expected
    assert metric_total(metrics.render().decode(), "inferpool_request_duration_seconds_created") > 0


def test_phases_counters_and_errors_land_in_their_labels():
    metrics = Metrics()
    inference = Inference("digits", 0.00003, 0.00001, 0.0002, 0.000009, 4, batch_seconds=0.0001)
    for _ in range(3):
        metrics.observe_inference(inference)
        metrics.observe_request("/predict", 200, 0.001, inference)
    metrics.observe_inference(Inference("other", 0.00003, 0.00001, 0.0002, 0.000009, 1))  # batching off
    for reason in ("load_shed", "invalid_json", "invalid_json"):
        metrics.observe_error(reason)
    text = metrics.render().decode()
    assert metric_total(text, "inferpool_requests_total", route="/predict", status="200") == 3
    assert metric_total(text, "inferpool_batch_size_sum", model="digits") == 12
    assert metric_total(text, "inferpool_batch_formation_seconds_count", model="digits") == 3
    assert metric_total(text, "inferpool_batch_formation_seconds_count", model="other") == 0
    assert metric_total(text, "inferpool_inference_seconds_count", model="other") == 1
    overhead = metric_total(text, "inferpool_server_overhead_seconds_sum", model="digits")
    assert overhead == pytest.approx(3 * (0.001 - 0.0002))
    assert metric_total(text, "inferpool_rejections_total", reason="load_shed") == 1
    assert metric_total(text, "inferpool_failures_total", reason="invalid_json") == 2


def test_errors_counted_from_threads_lose_nothing():
    # Starlette runs the sync exception handlers on its threadpool, beside the event loop.
    metrics = Metrics()

    def hammer() -> None:
        for _ in range(5000):
            metrics.observe_error("queue_full")

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metric_total(metrics.render().decode(), "inferpool_rejections_total", reason="queue_full") == 20000


def test_unsorted_buckets_are_refused():
    with pytest.raises(ValueError, match="sorted"):
        Metrics((0.1, 0.01))


WRITER = """
import sys
from inferpool.service.telemetry.metrics import Inference, Metrics
metrics = Metrics()
inference = Inference("digits", 0.00003, 0.00001, 0.0002, 0.000009, 1)
for i in range(int(sys.argv[1])):
    metrics.observe_inference(inference)
    metrics.observe_request("/predict", 200, 0.001, inference)
metrics.observe_error("deadline")
print("observed", flush=True)
sys.stdin.read()  # stay alive, with nothing flushed or closed, until the test has scraped
"""


def test_other_processes_counts_are_visible_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(n)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for n in (300, 500)
    ]
    try:
        for writer in writers:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "observed"
        scraper = Metrics()  # answers the scrape, observed nothing itself
        text = scraper.render().decode()
    finally:
        for writer in writers:
            writer.communicate("", timeout=30)
    assert metric_total(text, "inferpool_requests_total", route="/predict", status="200") == 800
    assert metric_total(text, "inferpool_inference_seconds_count", model="digits") == 800
    assert metric_total(text, "inferpool_request_duration_seconds_bucket", route="/predict", le="+Inf") == 800
    assert metric_total(text, "inferpool_server_overhead_seconds_sum") == pytest.approx(800 * (0.001 - 0.0002))
    assert metric_total(text, "inferpool_rejections_total", reason="deadline") == 2
    if PROMTOOL:  # test_observability_server insists on it; here the merge is the point
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
        assert (check.returncode, check.stdout, check.stderr) == (0, "", "")


def test_a_growing_file_keeps_earlier_slots_and_a_reused_pid_carries_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(metric_slots.SlotFile, "INITIAL_BYTES", 4096)
    monkeypatch.setattr(metric_slots, "_FILES", {})
    metrics = Metrics()
    metrics.observe_request("/first", 200, 0.001, None)
    for n in range(100):  # ~2 KB of keys each: the file is remapped several times
        metrics.observe_request(f"/route{n}", 200, 0.001, None)
    metrics.observe_request("/first", 200, 0.001, None)  # through the first mapping's view
    assert metric_total(metrics.render().decode(), "inferpool_requests_total", route="/first") == 2
    monkeypatch.setattr(metric_slots, "_FILES", {})  # as a restarted worker with the same pid
    again = Metrics()
    again.observe_request("/first", 200, 0.001, None)
    text = again.render().decode()
    assert metric_total(text, "inferpool_requests_total", route="/first") == 3
    assert metric_total(text, "inferpool_requests_total", route="/route99") == 1
