"""The front door's record of each finished request: its trace spans, its access-log line and
its payload-log record, for HTTP (``RequestContext``) and gRPC (``Servicer.handler``) alike.

One place rather than one per route: each front end calls here once, after the answer is sent,
with the timings the routes already took (the ``Inference`` in the scope or the gRPC context).
With tracing, the access log and the payload log all off (the default) there is no
``Observer`` at all, and the door's cost is a few ``is None`` tests per request.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from starlette.types import Message, Scope

from inferpool.engine.client import request_id
from inferpool.service.http.fastpath import HANDLER
from inferpool.service.telemetry.logs import model_served
from inferpool.service.telemetry.metrics import Inference
from inferpool.service.telemetry.payloads import PayloadLog, Record
from inferpool.service.telemetry.tracing import Tracing, caller_trace_id

if TYPE_CHECKING:  # config imports torch; the service only reads the settings it is given
    from inferpool.config import Settings

log = logging.getLogger(__name__)
access_log = logging.getLogger("inferpool.access")
HTTP_SPAN = "inferpool.predict"
TRACED_RPCS = frozenset({"ModelInfer"})  # not the probes: a trace per health check is noise
# The gRPC codes OpenTelemetry's conventions mark a server span's status ERROR for (the server's
# fault, not the caller's).
SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"})
INFERENCE = "inferpool.inference"  # the scope key the model routes leave their timings under
JSON_LENGTH = b"inference-header-content-length"
ENCODING = b"content-encoding"
Pairs = Iterable[tuple[str | bytes, str | bytes]]


class Watch:
    """One HTTP request's bytes in and out, and (when its payload is sampled) the bodies."""

    __slots__ = ("bytes_in", "bytes_out", "request", "response", "response_json_length")

    def __init__(self, capture: bool) -> None:
        self.bytes_in = self.bytes_out = 0
        self.request: list[bytes] | None = [] if capture else None
        self.response: list[bytes] | None = [] if capture else None
        self.response_json_length: int | None = None

    def received(self, message: Message) -> None:
        body = message.get("body", b"")
        self.bytes_in += len(body)
        if self.request is not None:
            self.request.append(body)

    def sent(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if self.response is not None:
                for name, value in message.get("headers", ()):
                    if name == JSON_LENGTH:
                        self.response_json_length = int(value)
            return
        body = message.get("body", b"")
        self.bytes_out += len(body)
        if self.response is not None:
            self.response.append(body)


class Observer:
    """Tracing, the access log and the payload log of one serving process; ``start`` it there
    (after the fork: the exporter's and the payload log's threads) and ``stop`` it at exit."""

    def __init__(self, settings: Settings, registry: CollectorRegistry) -> None:
        self.tracing = Tracing(settings.trace_sample) if settings.tracing else None
        self.access_sample = settings.access_log_sample if settings.access_log else 0.0
        self.payloads: PayloadLog | None = None
        self.payload_sample = settings.payload_log_sample
        if settings.payload_log is not None:
            names = frozenset(settings.payload_log_redact)
            self.payloads = PayloadLog(settings.payload_log, settings.payload_log_queue, names, registry)
        if self.access_sample:
            access_log.setLevel(logging.INFO)  # the line is asked for, whatever log_level says

    @classmethod
    def for_settings(cls, settings: Settings, registry: CollectorRegistry) -> Observer | None:
        """None when nothing is on: the door then skips every call here."""
        if settings.tracing or settings.access_log or settings.payload_log is not None:
            return cls(settings, registry)
        return None

    def start(self) -> None:
        if self.tracing is not None:
            self.tracing.start()
        if self.payloads is not None:
            self.payloads.start()

    def stop(self) -> None:
        if self.tracing is not None:
            self.tracing.stop()
        if self.payloads is not None:
            self.payloads.stop()

    def watch(self, scope: Scope) -> Watch:
        hot = HANDLER in scope  # a model route
        return Watch(hot and self.payloads is not None and random.random() < self.payload_sample)

    def http(self, scope: Scope, watch: Watch, route: str, status: int, started: float, ended: float) -> None:
        """A finished HTTP request (its answer already sent: a failure here is only logged)."""
        try:
            self._http(scope, watch, route, status, started, ended)
        except Exception:
            log.exception("recording the request's trace or logs failed")

    def _http(self, scope: Scope, watch: Watch, route: str, status: int, started: float, ended: float) -> None:
        inference: Inference | None = scope.get(INFERENCE)
        headers = scope["headers"]
        model, version = model_served.get() or ("", "")
        trace_id = None
        if self.tracing is not None and HANDLER in scope:
            attributes: dict[str, Any] = {
                "http.request.method": scope["method"],
                "http.route": route,
                "http.response.status_code": status,
                "inferpool.request_id": request_id.get(),
            }
            _model_attributes(attributes, model, version, inference)
            trace_id = self.tracing.record(HTTP_SPAN, headers, started, ended, attributes, inference, status >= 500)
        if self.access_sample and random.random() < self.access_sample:
            fields = {"method": scope["method"], "route": route, "status": status}
            self._access(fields, trace_id or caller_trace_id(headers), model, version, watch.bytes_in,
                         watch.bytes_out, ended - started, inference)  # fmt: skip
        if watch.request is not None and watch.response is not None and self.payloads is not None:
            found = {name: value for name, value in headers if name in (JSON_LENGTH, ENCODING)}
            length = found.get(JSON_LENGTH)
            record = _payload_record("http", route, status, model, version, trace_id or caller_trace_id(headers))
            record.update(
                request=b"".join(watch.request),
                request_json_length=None if length is None else int(length),
                request_encoding=found[ENCODING].decode("latin-1") if ENCODING in found else None,
                response=b"".join(watch.response),
                response_json_length=watch.response_json_length,
            )
            self.payloads.offer(record)

    def rpc(
        self, name: str, code: str, metadata: Pairs, started: float, ended: float, inference: Inference | None,
        request: Any, response: Any,
    ) -> None:  # fmt: skip
        """A finished gRPC call (``code``: its status code's name); a failure here is only logged."""
        try:
            self._rpc(name, code, metadata, started, ended, inference, request, response)
        except Exception:
            log.exception("recording the call's trace or logs failed")

    def _rpc(
        self, name: str, code: str, metadata: Pairs, started: float, ended: float, inference: Inference | None,
        request: Any, response: Any,
    ) -> None:  # fmt: skip
        model, version = model_served.get() or ("", "")
        trace_id = None
        if self.tracing is not None and name in TRACED_RPCS:
            attributes: dict[str, Any] = {
                "rpc.system": "grpc",
                "rpc.service": "inference.GRPCInferenceService",
                "rpc.method": name,
                "rpc.grpc.status_code": code,
                "inferpool.request_id": request_id.get(),
            }
            _model_attributes(attributes, model, version, inference)
            error = code in SERVER_ERRORS
            trace_id = self.tracing.record(name, metadata, started, ended, attributes, inference, error)
        if self.access_sample and random.random() < self.access_sample:
            size_out = response.ByteSize() if response is not None else 0
            self._access({"rpc": name, "status": code}, trace_id or caller_trace_id(metadata), model, version,
                         request.ByteSize(), size_out, ended - started, inference)  # fmt: skip
        if self.payloads is not None and name == "ModelInfer" and random.random() < self.payload_sample:
            record = _payload_record("grpc", name, code, model, version, trace_id or caller_trace_id(metadata))
            record["request_message"] = request
            if response is not None:
                record["response_message"] = response
            self.payloads.offer(record)

    @staticmethod
    def _access(
        fields: dict[str, Any], trace_id: str | None, model: str, version: str, bytes_in: int, bytes_out: int,
        seconds: float, inference: Inference | None,
    ) -> None:  # fmt: skip
        fields.update(
            request_id=request_id.get(), trace_id=trace_id, model=model or None, version=version or None,
            bytes_in=bytes_in, bytes_out=bytes_out, duration_ms=round(seconds * 1e3, 3),
        )  # fmt: skip
        if inference is not None:
            fields.update(
                decode_ms=round(inference.decode_seconds * 1e3, 3),
                queue_ms=round(inference.queue_seconds * 1e3, 3),
                batch_ms=round(inference.batch_seconds * 1e3, 3),
                inference_ms=round(inference.compute_seconds * 1e3, 3),
                encode_ms=round(inference.encode_seconds * 1e3, 3),
                batch_size=inference.batch_size,
            )
        access_log.info("%s", _Line(fields), extra={"access": fields})


class _Line:
    """The plain format's text of an access line, made only if a formatter asks for it (the
    JSON one takes the fields)."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.fields.items() if value is not None)


def _model_attributes(attributes: dict[str, Any], model: str, version: str, inference: Inference | None) -> None:
    if model:
        attributes["inferpool.model"] = model
        attributes["inferpool.model.version"] = version
    if inference is not None:
        attributes["inferpool.batch_size"] = inference.batch_size


def _payload_record(protocol: str, route: str, status: object, model: str, version: str, trace: str | None) -> Record:
    return {
        "time": time.time(), "request_id": request_id.get(), "trace_id": trace, "protocol": protocol,
        "route": route, "status": status, "model": model or None, "version": version or None,
    }  # fmt: skip
