"""Every Prometheus metric the service exports, defined in one place.

Each app gets its own registry so that several apps (tests, several models later) never
collide. Base units are seconds; buckets start at 50 µs because a warm small model answers
in well under a millisecond and coarser buckets would hide the server's own overhead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from service.host import ModelHost

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "inferpool_requests",
            "HTTP requests answered, by route template and status code.",
            ["route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "inferpool_request_duration_seconds",
            "End-to-end time from receiving a request to sending its response.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "inferpool_queue_wait_seconds",
            "Time a request waited for a worker thread.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.compute_seconds = Histogram(
            "inferpool_inference_seconds",
            "Time a runtime spent running the model for one request.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def watch(self, host: ModelHost) -> None:
        """Export the host's live pool state, read at scrape time (no per-request cost)."""
        self.registry.register(PoolCollector(host))

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        try:
            self.requests.labels(route, str(status)).inc()
            self.request_seconds.labels(route).observe(seconds)
        except Exception:  # a metrics failure must never fail a request
            log.exception("recording request metrics failed")

    def observe_inference(self, model: str, queue_seconds: float, compute_seconds: float) -> None:
        try:
            self.queue_seconds.labels(model).observe(queue_seconds)
            self.compute_seconds.labels(model).observe(compute_seconds)
        except Exception:
            log.exception("recording inference metrics failed")

    def render(self) -> bytes:
        return generate_latest(self.registry)


class PoolCollector(Collector):
    """Gauges of the serving pool; an autoscaler scales on in-flight requests per pod."""

    def __init__(self, host: ModelHost) -> None:
        self.host = host

    def collect(self) -> Iterator[GaugeMetricFamily]:
        model = self.host.model
        gauges = {
            "inferpool_inflight_requests": "Requests accepted and not yet answered (running or queued).",
            "inferpool_queue_depth": "Requests accepted and waiting for a runtime.",
            "inferpool_runtimes_busy": "Runtimes currently running a request.",
            "inferpool_runtimes": "Runtimes in the pool.",
        }
        families = {name: GaugeMetricFamily(name, doc, labels=["model"]) for name, doc in gauges.items()}
        if model is not None:
            busy = model.pool.size - model.pool.idle
            values = {
                "inferpool_inflight_requests": model.in_flight,
                "inferpool_queue_depth": max(0, model.in_flight - busy),
                "inferpool_runtimes_busy": busy,
                "inferpool_runtimes": model.pool.size,
            }
            for name, value in values.items():
                families[name].add_metric([model.name], value)
        yield from families.values()
