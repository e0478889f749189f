"""Every Prometheus metric the service exports, defined in one place (docs/metrics.md).

Base units are seconds; latency buckets start at 25 µs because a warm small model answers in
well under a millisecond and coarser buckets would hide the server's own overhead. Each app
gets its own registry, so several apps in one process (tests) never collide.

Per-request histograms and counters skip prometheus-client's metric objects (a lock and a
Python loop over the buckets per observation, held under the GIL; loadtest/bench/metrics_cost.py):
an observation is a ``bisect`` and two float adds into preallocated slots, rendered by a
collector at scrape time. Requests are observed on the event loop thread only (middleware,
async routes), so those adds take no lock; ``observe_error`` also runs on Starlette's
threadpool (sync exception handlers), so it and slot allocation take one.

With ``PROMETHEUS_MULTIPROC_DIR`` set (several processes) the slots are an mmap file per
process in prometheus-client's own multiprocess layout, written in place: its
``MultiProcessCollector`` merges every process's at scrape, with nothing to flush and no lag.
Gauges and the rare replacement counters stay prometheus-client objects.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, multiprocess

from inferpool.engine.client import EngineClient
from inferpool.service.telemetry.logs import model_served
from inferpool.service.telemetry.metric_slots import Child, Family, SlotCollector, SlotFile, bounds_of, observe
from inferpool.service.telemetry.process_usage import ServingProcesses
from inferpool.service.telemetry.traffic import TrafficMetrics

if TYPE_CHECKING:  # config imports torch; the service only reads the settings it is given
    from inferpool.config import Settings

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
# End-to-end durations past the default deadline: multiples of request_timeout_ms, so that
# requests that ran into it (504s, slow clients) land in buckets rather than all in +Inf.
BEYOND_TIMEOUT = (1.0, 2.0, 5.0)
# Refusals that protect the service (the client should retry elsewhere or later), as opposed
# to failures (the request itself or the model is at fault).
REJECTION_REASONS = frozenset(
    {"queue_full", "not_ready", "body_too_large", "predicted_wait", "deadline", "auth", "load_shed"}
)
# Every per-model series: the model's name and its version label ("" for the config's models,
# which Prometheus stores as no label at all, so their series are the ones they always were).
MODEL_LABELS = ("model", "version")
Labels = tuple[str, str]


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def batch_buckets(max_samples: int) -> tuple[float, ...]:
    """Powers of two up to the first that holds ``max_samples``: the largest model call."""
    buckets = [1.0]
    while buckets[-1] < max_samples:
        buckets.append(buckets[-1] * 2)
    return tuple(buckets)


def duration_buckets(latency_buckets: tuple[float, ...], timeout_ms: float) -> tuple[float, ...]:
    """The latency buckets, extended to multiples of the deadline when it lies beyond them."""
    top = latency_buckets[-1] if latency_buckets else 0.0
    return (*latency_buckets, *(b for k in BEYOND_TIMEOUT if (b := k * timeout_ms / 1e3) > top))


class Metrics:
    def __init__(
        self,
        latency_buckets: tuple[float, ...] = LATENCY_BUCKETS,
        *,
        max_samples: int | None = None,
        timeout_ms: float = 0.0,
    ) -> None:
        """``max_samples``: the most samples a model call can have (batch_size's buckets reach
        it); ``timeout_ms``: the default deadline (request durations get buckets past it)."""
        self.registry = r = CollectorRegistry()
        self._lock = threading.Lock()
        latency, fast = bounds_of(latency_buckets), bounds_of(FAST_BUCKETS)
        batch = bounds_of(BATCH_BUCKETS if max_samples is None else batch_buckets(max_samples))

        def phase(name: str, doc: str, bounds: tuple[float, ...] = latency) -> Family:
            return Family(name, doc, MODEL_LABELS, bounds)

        def gauge(name: str, doc: str, mode: str = "livesum", labels: tuple[str, ...] = MODEL_LABELS) -> Gauge:
            return Gauge(name, doc, labels, registry=r, multiprocess_mode=mode)  # type: ignore[arg-type]

        route_doc = "HTTP requests answered, by route template and status code."
        self.requests = Family("inferpool_requests", route_doc, ("route", "status"))
        end_to_end = "End to end: request received to response sent."
        durations = bounds_of(duration_buckets(latency_buckets, timeout_ms))
        self.request_seconds = Family("inferpool_request_duration_seconds", end_to_end, ("route",), durations)
        rpc_doc = "gRPC calls answered, by method and status code."
        self.rpcs = Family("inferpool_grpc_requests", rpc_doc, ("rpc", "code"))
        rpc_end_to_end = "End to end: gRPC call received to answer handed to gRPC."
        self.rpc_seconds = Family("inferpool_grpc_request_duration_seconds", rpc_end_to_end, ("rpc",), durations)
        # In the order observe_inference unpacks them.
        self._model_families = (
            phase("inferpool_decode_seconds", "Reading and parsing the body and checking it against the schema.", fast),
            phase("inferpool_queue_wait_seconds", "Waiting for a worker thread."),
            phase("inferpool_batch_formation_seconds", "Waiting for a batch to fill (observed when batching is on)."),
            phase("inferpool_inference_seconds", "Borrowing a runtime and running the model."),
            phase("inferpool_encode_seconds", "Encoding the response body.", fast),
            phase("inferpool_server_overhead_seconds", "End to end minus inference: what the server itself costs."),
            phase("inferpool_batch_size", "Samples per model call.", batch),
        )
        reject_doc = "Requests refused to protect the service, by reason."
        self.rejections = Family("inferpool_rejections", reject_doc, ("reason",))
        self.failures = Family("inferpool_failures", "Requests that failed, by reason.", ("reason",))
        self.traffic = TrafficMetrics(latency, self._child)
        """The response cache's and priority levels' (service/telemetry/traffic.py)."""
        self._values: list[float] = []
        self._files: dict[bool, SlotFile] = {}  # by "is a counter"
        if (directory := multiprocess_dir()) is None:
            families = [
                self.requests, self.request_seconds, self.rpcs, self.rpc_seconds,
                *self._model_families, self.rejections, self.failures, *self.traffic.families,
            ]  # fmt: skip
            r.register(SlotCollector(families))
            r.register(ServingProcesses(supervised=False))
        else:  # a file per type: the collector takes the type from the file's name
            for counter, kind in ((True, "counter"), (False, "histogram")):
                self._files[counter] = SlotFile.of(os.path.join(directory, f"{kind}_inferpool_{os.getpid()}.db"))
        self._routes: dict[tuple[str, Any], tuple[Child, Child]] = {}  # by (route, status)
        self._rpcs: dict[tuple[str, Any], tuple[Child, Child]] = {}  # by (rpc, code)
        self._models: dict[Labels, tuple[Child, ...]] = {}
        self._reasons: dict[str, Child] = {}

        # Written by refresh() only, at most every REFRESH_SECONDS: prometheus-client's own.
        replaced = "inferpool_runtime_replacements", "Runtimes rebuilt after the model raised."
        self.runtime_replacements = Counter(*replaced, MODEL_LABELS, registry=r)
        restarted = "inferpool_worker_replacements", "Worker threads restarted after one died."
        self.worker_replacements = Counter(*restarted, MODEL_LABELS, registry=r)
        wide = "inferpool_wide_lane_calls", "Model calls that ran alone in the pod on every core (the wide lane)."
        self.wide_lane_calls = Counter(*wide, MODEL_LABELS, registry=r)
        dropped = "inferpool_abandoned_requests", "Requests dropped unrun: their client left or their deadline passed."
        self.abandoned_requests = Counter(*dropped, MODEL_LABELS, registry=r)
        stopped = "inferpool_stopped_calls", "Model calls stopped midway: every request in them had stopped waiting."
        self.stopped_calls = Counter(*stopped, MODEL_LABELS, registry=r)
        self._seen_replacements: dict[tuple[str, Labels], int] = {}
        self._refreshed: dict[Labels, float] = {}
        self.in_flight = gauge("inferpool_inflight_requests", "Requests accepted and not yet answered.")
        self.queue_depth = gauge("inferpool_queue_depth", "Accepted requests waiting for a runtime.")
        self.runtimes_busy = gauge("inferpool_runtimes_busy", "Runtimes running a request.")
        self.runtimes_idle = gauge("inferpool_runtimes_idle", "Runtimes free to take a request.")
        self.runtimes = gauge("inferpool_runtimes", "Runtimes configured.")
        self.threads = gauge("inferpool_threads", "Inference threads configured (runtimes x intra-op threads).")
        door = "Requests inside the process as the door counts them: body arrived, answer not yet sent."
        self.door_requests = gauge("inferpool_door_requests", door, labels=())
        limit = "Requests the door admits at once before it sheds: the sum of runtimes + max_queue over the models."
        self.door_capacity = gauge("inferpool_door_capacity", limit, labels=())
        held = "Bytes of answers the response cache holds (response_cache_mb bounds each process's)."
        self.cache_bytes = gauge("inferpool_response_cache_bytes", held, labels=())
        self._door: Callable[[], tuple[int, int | None, int]] | None = None
        # "version" is the server's here (it was first); the model's is "model_version".
        info_labels = ("version", "model", "model_version", "backend", "precision", "dispatch", "torch_version")
        self.info = gauge("inferpool_build_info", "Always 1; the labels say what is serving.", "max", info_labels)

    @classmethod
    def for_settings(cls, settings: Settings) -> Metrics:
        """Buckets for this configuration: its latency buckets, batch sizes up to the largest
        call any model can make, request durations past its default deadline."""
        runtimes = [settings.runtime, *(entry.runtime for entry in settings.models if entry.runtime is not None)]
        max_samples = max(max(o.max_request_samples, o.max_batch_size) for o in runtimes)
        latency = tuple(settings.latency_buckets) if settings.latency_buckets else LATENCY_BUCKETS
        return cls(latency, max_samples=max_samples, timeout_ms=settings.request_timeout_ms)

    def _child(self, family: Family, values: tuple[str, ...]) -> Child:
        """A label set's slots, made on first sight (bounded: configured models, route
        templates x statuses, fixed reasons)."""
        with self._lock:
            found = family.children.get(values)
            if found is None:
                keys = family.keys(values)
                if self._files:
                    slots, index = self._files[not family.bounds].allocate(keys)
                else:
                    slots, index = self._values, tuple(range(len(self._values), len(self._values) + len(keys)))
                    self._values.extend([0.0] * len(keys))
                family.created[values] = time.time()
                found = family.children[values] = (slots, index, family.bounds)
            return found

    def watch_door(self, read: Callable[[], tuple[int, int | None, int]]) -> None:
        """Where the door's count and limit (``Activity``) and its cache's bytes come from; copied
        into their gauges whenever the models' gauges are."""
        self._door = read

    def model_ready(self, model: EngineClient, server_version: str, labels: Labels) -> None:
        """``model`` serves, labelled by ``labels`` (its name and version label: "" for the
        config's models; the front door's record of it holds them)."""
        info = model.info
        self.runtimes.labels(*labels).set(info.runtimes)
        self.threads.labels(*labels).set(info.threads)
        precision = (info.precision_selection or {}).get("served", "fp32")  # None: fp32 was asked
        self.info.labels(server_version, *labels, info.backend, precision, info.dispatch, info.torch_version).set(1)
        self.refresh(model, labels, force=True)
        # Its phases' slots now, at zero: made at its first request instead, they cost that
        # request over a millisecond (a forked process's first allocation in its metrics file).
        self._model_slots(labels)

    def refresh(self, model: EngineClient, labels: Labels, *, force: bool = False) -> None:
        """Copy the pool's live state into the gauges. Requests call it, but it writes at most
        every REFRESH_SECONDS (seven labelled writes per request showed up in profiles); a
        scrape forces it, so a single process always reports its exact state."""
        now = time.monotonic()
        if not force and now - self._refreshed.get(labels, -REFRESH_SECONDS) < REFRESH_SECONDS:
            return
        self._refreshed[labels] = now
        stats = model.stats()
        with self._lock:  # the loader thread (model_ready) and the event loop (scrapes) both come here
            self.in_flight.labels(*labels).set(stats.in_flight)
            self.runtimes_busy.labels(*labels).set(stats.busy_runtimes)
            self.runtimes_idle.labels(*labels).set(stats.idle_runtimes)
            self.queue_depth.labels(*labels).set(stats.queued)
            self._count_up(self.runtime_replacements, labels, stats.replaced_runtimes)
            self._count_up(self.worker_replacements, labels, stats.replaced_workers)
            self._count_up(self.wide_lane_calls, labels, stats.wide_calls)
            self._count_up(self.abandoned_requests, labels, stats.abandoned)
            self._count_up(self.stopped_calls, labels, stats.stopped_calls)
            if self._door is not None:
                inside, limit, cached = self._door()
                self.door_requests.set(inside)
                self.door_capacity.set(limit or 0)
                self.cache_bytes.set(cached)

    def _count_up(self, counter: Counter, labels: Labels, total: int) -> None:
        """The engine keeps running totals; a counter needs the increments since last time."""
        key = (str(id(counter)), labels)
        delta = total - self._seen_replacements.get(key, 0)
        if delta > 0:
            counter.labels(*labels).inc(delta)
            self._seen_replacements[key] = total

    # The observe_* methods catch rather than use a context manager: a try costs nothing until
    # something raises, and a metrics failure must never fail a request.

    def observe_request(self, route: str, status: int, seconds: float, inference: Inference | None) -> None:
        self._observe_call(self._routes, (self.requests, self.request_seconds), route, status, seconds, inference)

    def observe_rpc(self, rpc: str, code: str, seconds: float, inference: Inference | None) -> None:
        """A gRPC call, as observe_request observes an HTTP one (on the event loop thread too)."""
        self._observe_call(self._rpcs, (self.rpcs, self.rpc_seconds), rpc, code, seconds, inference)

    def _observe_call(
        self,
        seen: dict[tuple[str, Any], tuple[Child, Child]],
        families: tuple[Family, Family],
        name: str,
        outcome: object,
        seconds: float,
        inference: Inference | None,
    ) -> None:
        """One answered call: its count by (name, outcome), its duration by name and, for a
        model call, the server's own share of it."""
        try:
            found = seen.get((name, outcome))
            if found is None:
                count = self._child(families[0], (name, str(outcome)))
                found = seen[name, outcome] = (count, self._child(families[1], (name,)))
            slots, index, _ = found[0]
            slots[index[0]] += 1.0
            observe(found[1], seconds)
            if inference is not None:
                observe(self._model(inference)[5], seconds - inference.compute_seconds)
        except Exception:
            log.exception("recording request metrics failed")

    def _model(self, inference: Inference) -> tuple[Child, ...]:
        return self._model_slots((inference.model, inference.version))

    def _model_slots(self, labels: Labels) -> tuple[Child, ...]:
        found = self._models.get(labels)
        if found is None:
            found = self._models[labels] = tuple(self._child(family, labels) for family in self._model_families)
        return found

    def observe_inference(self, inference: Inference) -> None:
        try:
            decode, queue, batch, compute, encode, _, size = self._model(inference)
            observe(decode, inference.decode_seconds)
            observe(queue, inference.queue_seconds)
            if inference.batch_size > 1 or inference.batch_seconds:
                observe(batch, inference.batch_seconds)
            observe(compute, inference.compute_seconds)
            observe(encode, inference.encode_seconds)
            observe(size, inference.batch_size)
        except Exception:
            log.exception("recording inference metrics failed")

    def observe_error(self, reason: str) -> None:
        try:
            found = self._reasons.get(reason)
            if found is None:
                family = self.rejections if reason in REJECTION_REASONS else self.failures
                found = self._reasons[reason] = self._child(family, (reason,))
            slots, index, _ = found
            with self._lock:  # Starlette runs sync exception handlers on its threadpool
                slots[index[0]] += 1.0
        except Exception:
            log.exception("recording error metrics failed")

    def render(self) -> bytes:
        if not self._files or (directory := multiprocess_dir()) is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=directory)  # type: ignore[no-untyped-call]
        merged.register(ServingProcesses(supervised=True))
        return generate_latest(merged)


def _served_version() -> str:
    served = model_served.get()
    return served[1] if served is not None else ""


@dataclass(slots=True)
class Inference:
    """One request's phases, as the route measured them (seconds)."""

    model: str
    decode_seconds: float
    queue_seconds: float
    compute_seconds: float
    encode_seconds: float
    batch_size: int
    batch_seconds: float = 0.0
    marks: tuple[float, float, float, float] | None = None
    """Where the phases happened, for traces: ``time.perf_counter()`` when the body began to
    arrive, when it was parsed and when encoding began, and the engine's ``dispatched``
    (``time.monotonic()``). One field, not four: a dataclass pays per field, per request."""
    version: str = field(default_factory=_served_version)
    """The model's version label; by default the one the request resolved (ModelHost.get), so
    that every front end's observations carry it without passing it along."""

    def server_timing(self, total_seconds: float) -> str:
        """The ``Server-Timing`` header value (milliseconds, as the standard has it)."""
        # One format string: a join over a generator of f-strings measured several times the cost.
        return SERVER_TIMING % (
            self.decode_seconds * 1e3, self.queue_seconds * 1e3, self.batch_seconds * 1e3,
            self.compute_seconds * 1e3, self.encode_seconds * 1e3, total_seconds * 1e3,
        )  # fmt: skip
