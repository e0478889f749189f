"""OpenTelemetry traces, built after the fact from the timings every request already records.

Nothing here runs inside a request's phases: the front door (service/telemetry/observe.py) calls
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
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from inferpool.service.telemetry.metrics import Inference

if TYPE_CHECKING:  # the otel extra: imported at start() only
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import SpanContext

log = logging.getLogger(__name__)
TRACE_HEADERS = ("traceparent", "tracestate")
BATCHES_REMEMBERED = 256
"""Recent batches' spans, by (model, dispatch time): the requests of one batch finish within
microseconds of each other, so this only has to outlive one batch's answers."""
SHUTDOWN_SECONDS = 2.0  # what the exit may wait for spans still queued (a collector may be down)


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
    """One serving process's tracer; ``start`` after the fork, ``stop`` at the drain's end.

    The spans are the SDK's ``ReadableSpan`` made whole (ids, times, attributes) and handed to
    its ``BatchSpanProcessor``, rather than opened and ended through a ``Tracer``: a finished
    request has nothing left to record, and the Tracer's per-span machinery (locks, limits,
    context objects) cost several times more per span (loadtest/bench/observability.py). Sampling,
    ids, the resource and the export are the SDK's own."""

    def __init__(self, sample: float) -> None:
        self.sample = sample
        self.sdk: Any = None
        """The SDK's pieces, imported by ``start`` (the otel extra is optional)."""
        self._perf = self._mono = 0
        self._batches: OrderedDict[tuple[str, float], SpanContext] = OrderedDict()

    def start(self) -> None:
        from types import SimpleNamespace

        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = Resource.create({"process.pid": os.getpid()})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "inferpool"}))
        # OTEL_TRACES_SAMPLER, when set, is the SDK's to read (sampler=None); otherwise the
        # setting's ratio for requests that arrive without a parent, the caller's choice otherwise.
        sampler = None if os.environ.get("OTEL_TRACES_SAMPLER") else ParentBased(TraceIdRatioBased(self.sample))

        class HashedOnce(Resource):
            """Its hash computed once: the OTLP encoder groups spans by resource, hashing it per
            span, and Resource's hash is a JSON dump of its attributes (a fifth of the export
            thread's time, which holds the GIL the event loop needs)."""

            def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
                super().__init__(attributes, schema_url)
                self._hash = super().__hash__()

            def __hash__(self) -> int:
                return self._hash

            def __eq__(self, other: object) -> bool:
                return bool(super().__eq__(other))

        resource = HashedOnce(resource.attributes, resource.schema_url)
        provider = TracerProvider(sampler=sampler, resource=resource, shutdown_on_exit=False)
        make = EXPORTERS[exporter_key(os.environ)]
        self.sdk = SimpleNamespace(
            span=ReadableSpan, context=SpanContext, link=Link, current=trace.get_current_span,
            extract=TraceContextTextMapPropagator().extract, sampler=provider.sampler, ids=provider.id_generator,
            resource=provider.resource, scope=InstrumentationScope("inferpool"),
            processor=SpanProcessor() if make is None else BatchSpanProcessor(make()),
            server=SpanKind.SERVER, internal=SpanKind.INTERNAL, sampled=TraceFlags(TraceFlags.SAMPLED),
            error=Status(StatusCode.ERROR), unset=Status(StatusCode.UNSET),
        )  # fmt: skip
        self._perf, self._mono = _clock_offsets()

    def stop(self) -> None:
        """Export what is still queued, for at most SHUTDOWN_SECONDS: the SDK's own shutdown
        waits up to 30 s, which a collector that is down would add to every exit. Past it, the
        daemon thread ends with the process."""
        sdk, self.sdk = self.sdk, None
        if sdk is not None:
            ending = threading.Thread(target=sdk.processor.shutdown, name="otel-shutdown", daemon=True)
            ending.start()
            ending.join(SHUTDOWN_SECONDS)

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
        sdk = self.sdk
        if sdk is None:
            return None
        parent_context = sdk.extract(_trace_headers(carrier))
        parent = sdk.current(parent_context).get_span_context()
        trace_id = parent.trace_id if parent.is_valid else sdk.ids.generate_trace_id()
        decision = sdk.sampler.should_sample(parent_context, trace_id, name, sdk.server, attributes)
        if not decision.decision.is_sampled():
            return None
        context = sdk.context(trace_id, sdk.ids.generate_span_id(), False, sdk.sampled, decision.trace_state)
        on_end = sdk.processor.on_end
        on_end(
            sdk.span(
                name, context, parent if parent.is_valid else None, sdk.resource, attributes,
                kind=sdk.server, status=sdk.error if error else sdk.unset, instrumentation_scope=sdk.scope,
                start_time=int(started * 1e9) + self._perf, end_time=int(ended * 1e9) + self._perf,
            )
        )  # fmt: skip
        if inference is not None:
            for span in self._phases(context, inference):
                on_end(span)
        return format(trace_id, "032x")

    def _phases(self, parent: SpanContext, inference: Inference) -> list[Any]:
        """The phases as children, each where it happened: decode [received, parsed], queue
        (admission, the wait for a worker and validation) up to the batch's wait, the model
        call, encode; the gap before encode is the event loop taking the answer back."""
        sdk, perf, mono = self.sdk, self._perf, self._mono
        spans: list[Any] = []

        def child(name: str, start_ns: int, end_ns: int, links: tuple[Any, ...] = ()) -> None:
            context = sdk.context(parent.trace_id, sdk.ids.generate_span_id(), False, sdk.sampled, parent.trace_state)
            spans.append(
                sdk.span(
                    name, context, parent, sdk.resource, {}, links=links, kind=sdk.internal,
                    instrumentation_scope=sdk.scope, start_time=start_ns, end_time=max(start_ns, end_ns),
                )
            )  # fmt: skip

        i = inference
        if i.marks is None:  # a caller that did not say when (none of the front ends)
            return spans
        received, parsed, encoding_at, dispatched_at = i.marks
        child("decode", int(received * 1e9) + perf, int(parsed * 1e9) + perf)
        dispatched = int(dispatched_at * 1e9) + mono
        batch_start = dispatched - int(i.batch_seconds * 1e9)
        child("queue", int(parsed * 1e9) + perf, batch_start)
        if i.batch_seconds:
            child("batch", batch_start, dispatched)
        compute_end = dispatched + int(i.compute_seconds * 1e9)
        links = (sdk.link(self._batch(i, dispatched_at, dispatched, compute_end, spans)),) if i.batch_size > 1 else ()
        child("inference", dispatched, compute_end, links)
        encoding = int(encoding_at * 1e9) + perf
        child("encode", encoding, encoding + int(i.encode_seconds * 1e9))
        return spans

    def _batch(self, i: Inference, dispatched: float, start_ns: int, end_ns: int, spans: list[Any]) -> SpanContext:
        """The batch's own span, made by the first of its requests to finish here (added to
        ``spans``): each request's trace links to the model call it shared. A root of its own,
        kept whenever one of its requests is sampled (a link to a span never exported leads
        nowhere)."""
        sdk = self.sdk
        key = (i.model, dispatched)  # one process's batches: its engine's
        found = self._batches.get(key)
        if found is None:
            found = self._batches[key] = sdk.context(
                sdk.ids.generate_trace_id(), sdk.ids.generate_span_id(), False, sdk.sampled
            )
            attributes = {"inferpool.model": i.model, "inferpool.batch_size": i.batch_size}
            spans.append(
                sdk.span(
                    "inferpool.batch", found, None, sdk.resource, attributes, kind=sdk.internal,
                    instrumentation_scope=sdk.scope, start_time=start_ns, end_time=end_ns,
                )
            )  # fmt: skip
            if len(self._batches) > BATCHES_REMEMBERED:
                self._batches.popitem(last=False)
        return found


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
