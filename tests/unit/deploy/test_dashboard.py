"""deploy/monitoring/dashboard.json: a Grafana dashboard model whose queries name real metrics
(the e2e test, tests/e2e/deploy/test_dashboard.py, runs them against a real Prometheus)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.dashboard import concrete, load, panels, queries

METRICS_DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
REQUIRED = {
    "Request rate by route and status": "inferpool_requests_total",
    "Errors by reason": "inferpool_failures_total",
    "Phase latency: inference": "inferpool_inference_seconds_bucket",
    "Phase latency: queue wait": "inferpool_queue_wait_seconds_bucket",
    "Queue and in flight (per model)": "inferpool_queue_depth",
    "Door: requests inside vs capacity (per replica)": "inferpool_door_capacity",
    "Batch size (samples per model call)": "inferpool_batch_size_bucket",
    "Server overhead vs inference (p99)": "inferpool_server_overhead_seconds_bucket",
    "Backend, precision and dispatch in use": "inferpool_build_info",
    "Response cache: hit ratio (per model)": "inferpool_response_cache_total",
    "Response cache: lookups and bytes held": "inferpool_response_cache_bytes",
    "Requests by priority level": "inferpool_priority_requests_total",
    "Latency by priority level (p99)": "inferpool_priority_request_duration_seconds_bucket",
    "Shed share by priority level": "inferpool_priority_requests_total",
    "CPU per process": "inferpool_process_cpu_seconds_total",
    "Memory per process (PSS)": "inferpool_process_pss_bytes",
}


def test_dashboard_model_is_well_formed():
    dashboard = load()
    assert dashboard["uid"] == "inferpool"
    assert dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "job", "model"}
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
        if panel["type"] == "heatmap":
            assert all(t["format"] == "heatmap" and "_bucket" in t["expr"] for t in panel["targets"]), panel["title"]


def test_the_asked_panels_are_there():
    by_title = {p["title"]: p for p in panels(load())}
    for title, metric in REQUIRED.items():
        assert title in by_title, title
        assert any(metric in t["expr"] for t in by_title[title]["targets"]), title
    heatmaps = {p["title"] for p in by_title.values() if p["type"] == "heatmap"}
    assert {f"Phase latency: {phase}" for phase in ("decode", "queue wait", "inference", "encode")} <= heatmaps


def test_queries_name_only_documented_metrics():
    documented = set(re.findall(r"`(inferpool_\w+)", METRICS_DOC.read_text()))
    for name, expr in queries(load()):
        used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\binferpool_\w+", expr)}
        assert used, name
        assert used <= documented, (name, used - documented)


def test_variables_become_concrete():
    assert (
        concrete('rate(x{job=~"$job", model=~"${model}"}[$__rate_interval])') == 'rate(x{job=~".*", model=~".*"}[60s])'
    )
    with pytest.raises(KeyError):
        concrete("rate(x[$__range])")
