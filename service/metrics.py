"""Every Prometheus metric the service exports, defined in one place (docs/metrics.md).

Base units are seconds; latency buckets start at 25 µs because a warm small model answers in
well under a millisecond and coarser buckets would hide the server's own overhead. Each app
gets its own registry, so several apps in one process (tests) never collide. With
``PROMETHEUS_MULTIPROC_DIR`` set (several server processes), values live in shared files and
``render`` aggregates every process's; gauges then sum over live processes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from engine import EngineClient

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (
    0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.0075,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# Validation and encoding of a small request take microseconds, not milliseconds.
FAST_BUCKETS = (0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.1, 1.0)
# With several processes, the gauges of processes that do not answer a scrape lag by this much.
REFRESH_SECONDS = 0.25
SERVER_TIMING = "decode;dur=%.3f, queue;dur=%.3f, batch;dur=%.3f, inference;dur=%.3f, encode;dur=%.3f, total;dur=%.3f"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# Refusals that protect the service (the client should retry elsewhere or later), as opposed
# to failures (the request itself or the model is at fault).
REJECTION_REASONS = frozenset(
    {"queue_full", "not_ready", "body_too_large", "predicted_wait", "deadline", "auth", "load_shed"}
)


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    def __init__(self, latency_buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.registry = CollectorRegistry()
        r = self.registry

        def phase(name: str, doc: str, buckets: tuple[float, ...] = latency_buckets) -> Histogram:
            return Histogram(name, doc, ["model"], buckets=buckets, registry=r)

        def gauge(name: str, doc: str, mode: str = "livesum", labels: tuple[str, ...] = ("model",)) -> Gauge:
            return Gauge(name, doc, labels, registry=r, multiprocess_mode=mode)  # type: ignore[arg-type]

        self.requests = Counter(
            "inferpool_requests", "HTTP requests answered, by route template and status code.",
            ["route", "status"], registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "inferpool_request_duration_seconds", "End to end: request received to response sent.",
            ["route"], buckets=latency_buckets, registry=r,
        )  # fmt: skip
        self.decode_seconds = phase(
            "inferpool_decode_seconds", "Reading and parsing the body and checking it against the schema.",
            FAST_BUCKETS,
        )  # fmt: skip
        self.queue_seconds = phase("inferpool_queue_wait_seconds", "Waiting for a worker thread.")
        self.batch_seconds = phase(
            "inferpool_batch_formation_seconds", "Waiting for a batch to fill (observed when batching is on)."
        )
        self.compute_seconds = phase("inferpool_inference_seconds", "Borrowing a runtime and running the model.")
        self.encode_seconds = phase("inferpool_encode_seconds", "Encoding the response body.", FAST_BUCKETS)
        self.overhead_seconds = phase(
            "inferpool_server_overhead_seconds", "End to end minus inference: what the server itself costs."
        )
        self.batch_size = Histogram(
            "inferpool_batch_size", "Samples per model call.", ["model"], buckets=BATCH_BUCKETS, registry=r
        )
        self.rejections = Counter(
            "inferpool_rejections", "Requests refused to protect the service, by reason.", ["reason"], registry=r
        )
        self.failures = Counter("inferpool_failures", "Requests that failed, by reason.", ["reason"], registry=r)
        self.runtime_replacements = Counter(
            "inferpool_runtime_replacements", "Runtimes rebuilt after the model raised.", ["model"], registry=r
        )
        self.worker_replacements = Counter(
            "inferpool_worker_replacements", "Worker threads restarted after one died.", ["model"], registry=r
        )
        self._seen_replacements: dict[tuple[str, str], int] = {}
        # Labelled children looked up once: labels() takes a lock and builds a key each time,
        # ~2 µs, nine times a request. Keys are bounded: configured models, route templates x statuses.
        self._children: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self._refreshed: dict[str, float] = {}
        self.in_flight = gauge("inferpool_inflight_requests", "Requests accepted and not yet answered.")
        self.queue_depth = gauge("inferpool_queue_depth", "Accepted requests waiting for a runtime.")
        self.runtimes_busy = gauge("inferpool_runtimes_busy", "Runtimes running a request.")
        self.runtimes_idle = gauge("inferpool_runtimes_idle", "Runtimes free to take a request.")
        self.runtimes = gauge("inferpool_runtimes", "Runtimes configured.")
        self.threads = gauge("inferpool_threads", "Inference threads configured (runtimes x intra-op threads).")
        self.info = gauge(
            "inferpool_build_info",
            "Always 1; the labels say what is serving.",
            mode="max",
            labels=("version", "model", "backend", "dispatch", "torch_version"),
        )

    def model_ready(self, model: EngineClient, version: str) -> None:
        info = model.info
        self.runtimes.labels(model.name).set(info.runtimes)
        self.threads.labels(model.name).set(info.threads)
        self.info.labels(version, model.name, info.backend, info.dispatch, info.torch_version).set(1)
        self.refresh(model, force=True)

    def refresh(self, model: EngineClient, *, force: bool = False) -> None:
        """Copy the pool's live state into the gauges. Requests call it, but it writes at most
        every REFRESH_SECONDS (seven labelled writes per request showed up in profiles); a
        scrape forces it, so a single process always reports its exact state."""
        now = time.monotonic()
        if not force and now - self._refreshed.get(model.name, -REFRESH_SECONDS) < REFRESH_SECONDS:
            return
        self._refreshed[model.name] = now
        stats = model.stats()
        self.in_flight.labels(model.name).set(stats.in_flight)
        self.runtimes_busy.labels(model.name).set(stats.busy_runtimes)
        self.runtimes_idle.labels(model.name).set(stats.idle_runtimes)
        self.queue_depth.labels(model.name).set(stats.queued)
        self._count_up(self.runtime_replacements, model.name, stats.replaced_runtimes)
        self._count_up(self.worker_replacements, model.name, stats.replaced_workers)

    def _count_up(self, counter: Counter, model: str, total: int) -> None:
        """The engine keeps running totals; a counter needs the increments since last time."""
        key = (str(id(counter)), model)
        delta = total - self._seen_replacements.get(key, 0)
        if delta > 0:
            counter.labels(model).inc(delta)
            self._seen_replacements[key] = total

    def _labelled(self, key: tuple[str, ...], make: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = make()
        return found

    def observe_request(self, route: str, status: int, seconds: float, inference: Inference | None) -> None:
        with _Guard("request"):
            count, duration = self._labelled(
                ("request", route, str(status)),
                lambda: (self.requests.labels(route, str(status)), self.request_seconds.labels(route)),
            )
            count.inc()
            duration.observe(seconds)
            if inference is not None:
                self._model_children(inference.model)[-1].observe(seconds - inference.compute_seconds)

    def _model_children(self, model: str) -> tuple[Any, ...]:
        histograms = (
            self.decode_seconds, self.queue_seconds, self.batch_seconds, self.compute_seconds,
            self.encode_seconds, self.batch_size, self.overhead_seconds,
        )  # fmt: skip
        return self._labelled(("model", model), lambda: tuple(h.labels(model) for h in histograms))

    def observe_inference(self, inference: Inference) -> None:
        with _Guard("inference"):
            decode, queue, batch, compute, encode, size, _ = self._model_children(inference.model)
            decode.observe(inference.decode_seconds)
            queue.observe(inference.queue_seconds)
            if inference.batch_size > 1 or inference.batch_seconds:
                batch.observe(inference.batch_seconds)
            compute.observe(inference.compute_seconds)
            encode.observe(inference.encode_seconds)
            size.observe(inference.batch_size)

    def observe_error(self, reason: str) -> None:
        with _Guard("error"):
            (self.rejections if reason in REJECTION_REASONS else self.failures).labels(reason).inc()

    def render(self) -> bytes:
        directory = multiprocess_dir()
        if directory is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=directory)  # type: ignore[no-untyped-call]
        return generate_latest(merged)


@dataclass(frozen=True)
class Inference:
    """One request's phases, as the route measured them (seconds)."""

    model: str
    decode_seconds: float
    queue_seconds: float
    compute_seconds: float
    encode_seconds: float
    batch_size: int
    batch_seconds: float = 0.0

    def server_timing(self, total_seconds: float) -> str:
        """The ``Server-Timing`` header value (milliseconds, as the standard has it)."""
        # One format string: a join over a generator of f-strings measured ~5x the cost, ~10 µs a request.
        return SERVER_TIMING % (
            self.decode_seconds * 1e3, self.queue_seconds * 1e3, self.batch_seconds * 1e3,
            self.compute_seconds * 1e3, self.encode_seconds * 1e3, total_seconds * 1e3,
        )  # fmt: skip


class _Guard:
    """A metrics failure must never fail a request: log it and carry on."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if exc_type is not None and issubclass(exc_type, Exception):
            log.exception("recording %s metrics failed", self.what)
            return True
        return False
