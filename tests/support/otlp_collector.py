"""A minimal OTLP trace receiver on 127.0.0.1, over HTTP/protobuf and over gRPC: it decodes
each ExportTraceServiceRequest with opentelemetry-proto (the wire format's own definitions)
and keeps the spans, for the tracing tests to check what a real server exported."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2


@dataclass
class Collected:
    spans: list[trace_pb2.Span] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                self.resources.append(attributes(resource_spans.resource.attributes))
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[trace_pb2.Span]:
        """The spans once ``predicate(spans)`` holds; raises with what came when time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"collector got {[s.name for s in spans]} in {timeout}s")
            time.sleep(0.05)


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP KeyValues as a dict of plain values."""
    found: dict[str, Any] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        found[pair.key] = getattr(pair.value, kind) if kind else None
    return found


@contextmanager
def http_collector(port: int) -> Iterator[Collected]:
    collected = Collected()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            assert self.path == "/v1/traces", self.path
            assert self.headers["content-type"] == "application/x-protobuf"
            collected.add(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collected
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def grpc_collector(port: int) -> Iterator[Collected]:
    collected = Collected()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
            collected.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield collected
    finally:
        server.stop(1).wait(5)
