"""OpenTelemetry traces, built after the fact from the timings every request already records.

Nothing here runs inside a request's phases: the front door (service/observe.py) calls
``Tracing.record`` once the answer is sent, with the request's start and end and its
``Inference`` (the phases' durations and where they began), and the spans are made with
explicit start and end times. So a request costs no context switches or span objects while
it runs, and nothing at all with tracing off (the door then holds no ``Tracing``).

The SDK (the ``otel`` extra) is imported only when tracing is on. Its ``BatchSpanProcessor``
exports from a thread of its own, off the request path; ``start`` makes it in each serving
process, after the fork (a thread made before would not exist in the children). Exporter,
endpoint, sampler and service name come from the standard ``OTEL_*`` variables, read by the
SDK itself.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from inferpool.service.metrics import Inference

if TYPE_CHECKING:  # the otel extra: imported at start() only
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import SpanContext, Tracer

log = logging.getLogger(__name__)
TRACE_HEADERS = ("traceparent", "tracestate")
BATCHES_REMEMBERED = 256
"""Recent batches' spans, by (model, dispatch time): the requests of one batch finish within
microseconds of each other, so this only has to outlive one batch's answers."""
SHUTDOWN_MILLIS = 2000  # what the drain may wait for spans still queued (a collector may be down)


def _otlp_http() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _otlp_grpc() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _console() -> SpanExporter:
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter()


# By OTEL_TRACES_EXPORTER, then OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL for "otlp" (the names the
# settings accept: config/settings.py's TRACE_EXPORTERS and OTLP_PROTOCOLS).
EXPORTERS: dict[str, Callable[[], SpanExporter] | None] = {
    "otlp/http/protobuf": _otlp_http,
    "otlp/grpc": _otlp_grpc,
    "console": _console,
    "none": None,
}


def exporter_key(environ: Mapping[str, str]) -> str:
    """The EXPORTERS key the ``OTEL_*`` variables select (the spec's defaults: otlp over HTTP)."""
    name = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if name != "otlp":
        return name
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    return f"otlp/{(protocol or 'http/protobuf').strip().lower()}"


def _clock_offsets() -> tuple[int, int]:
    """Nanoseconds to add to perf_counter and to monotonic readings for wall-clock time."""
    wall = time.time_ns()
    return wall - time.perf_counter_ns(), wall - time.monotonic_ns()


class Tracing:
    """One serving process's tracer; ``start`` after the fork, ``stop`` at the drain's end."""

    def __init__(self, sample: float) -> None:
        self.sample = sample
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self._perf = self._mono = 0
        self._batches: OrderedDict[tuple[str, float], SpanContext] = OrderedDict()

    def start(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        resource = Resource.create({"process.pid": os.getpid()})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "inferpool"}))
        # OTEL_TRACES_SAMPLER, when set, is the SDK's to read (sampler=None); otherwise the
        # setting's ratio for requests that arrive without a parent, the caller's choice otherwise.
        sampler = None if os.environ.get("OTEL_TRACES_SAMPLER") else ParentBased(TraceIdRatioBased(self.sample))
        self.provider = provider = TracerProvider(sampler=sampler, resource=resource)
        make = EXPORTERS[exporter_key(os.environ)]
        if make is not None:
            provider.add_span_processor(BatchSpanProcessor(make()))
        self.tracer = provider.get_tracer("inferpool")
        self._perf, self._mono = _clock_offsets()

    def stop(self) -> None:
        if self.provider is not None:
            self.provider.force_flush(SHUTDOWN_MILLIS)
            self.provider.shutdown()
            self.provider = self.tracer = None

    def record(
        self,
        name: str,
        carrier: Iterable[tuple[str | bytes, str | bytes]],
        started: float,
        ended: float,
        attributes: dict[str, Any],
        inference: Inference | None,
        error: bool,
    ) -> str | None:
        """A finished request's server span (and its phases' children): ``started`` and
        ``ended`` are ``perf_counter`` readings. Returns the trace id (hex), None if unsampled."""
        tracer = self.tracer
        if tracer is None:
            return None
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = TraceContextTextMapPropagator().extract(_trace_headers(carrier))
        perf = self._perf
        span = tracer.start_span(name, parent, SpanKind.SERVER, attributes, start_time=int(started * 1e9) + perf)
        if not span.is_recording():
            return None
        if error:
            span.set_status(Status(StatusCode.ERROR))
        if inference is not None:
            self._phases(tracer, trace.set_span_in_context(span), inference)
        span.end(int(ended * 1e9) + perf)
        return format(span.get_span_context().trace_id, "032x")

    def _phases(self, tracer: Tracer, context: Any, inference: Inference) -> None:
        """The phases as children, each where it happened: decode [received, parsed], queue
        (admission, the wait for a worker and validation) up to the batch's wait, the model
        call, encode; the gap before encode is the event loop taking the answer back."""
        perf, mono = self._perf, self._mono

        def child(name: str, start_ns: int, end_ns: int, links: list[Any] | None = None) -> None:
            tracer.start_span(name, context, start_time=start_ns, links=links).end(max(start_ns, end_ns))

        def at_perf(seconds: float) -> int:
            return int(seconds * 1e9) + perf

        def at_mono(seconds: float) -> int:
            return int(seconds * 1e9) + mono

        i = inference
        child("decode", at_perf(i.received), at_perf(i.parsed))
        dispatched = at_mono(i.dispatched)
        batch_start = dispatched - int(i.batch_seconds * 1e9)
        child("queue", at_perf(i.parsed), batch_start)
        if i.batch_seconds:
            child("batch", batch_start, dispatched)
        compute_end = dispatched + int(i.compute_seconds * 1e9)
        links = self._batch_link(tracer, i, dispatched, compute_end) if i.batch_size > 1 else None
        child("inference", dispatched, compute_end, links)
        child("encode", at_perf(i.encoding), at_perf(i.encoding + i.encode_seconds))

    def _batch_link(self, tracer: Tracer, i: Inference, start_ns: int, end_ns: int) -> list[Any]:
        """A link to the batch's own span (made by the batch's first request to finish here),
        so that each request's trace leads to the model call it shared."""
        from opentelemetry.trace import Link

        key = (i.model, i.dispatched)  # one process's batches: its engine's
        found = self._batches.get(key)
        if found is None:
            attributes: dict[str, Any] = {"inferpool.model": i.model, "inferpool.batch_size": i.batch_size}
            span = tracer.start_span("inferpool.batch", None, attributes=attributes, start_time=start_ns)
            span.end(end_ns)
            found = self._batches[key] = span.get_span_context()
            if len(self._batches) > BATCHES_REMEMBERED:
                self._batches.popitem(last=False)
        return [Link(found)] if found.is_valid else []


def _trace_headers(carrier: Iterable[tuple[str | bytes, str | bytes]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in carrier:
        key = name if isinstance(name, str) else name.decode("latin-1")
        if key in TRACE_HEADERS:
            found[key] = value if isinstance(value, str) else value.decode("latin-1")
    return found


def caller_trace_id(carrier: Iterable[tuple[str | bytes, str | bytes]]) -> str | None:
    """The trace id of a ``traceparent`` (version-traceid-spanid-flags), for the access log
    when tracing is off; None without one or with one malformed."""
    header = _trace_headers(carrier).get("traceparent", "")
    parts = header.split("-")
    if len(parts) >= 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
        try:
            int(parts[1], 16)
        except ValueError:
            return None
        return parts[1]
    return None
