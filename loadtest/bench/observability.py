"""The door's own cost per request, in process: today's ``RequestContext`` against this one with
observability off, tracing on (sample 1.0: 5 spans made and handed to a processor that drops
them, so the export's encoding is not in it), tracing on at sample 0 (what an unsampled request
costs), and the access log on (to a null stream).

    python -m loadtest.bench_door_cost --base DIR [--requests 20000] [--rounds 5]

``DIR`` is a checkout of the revision to compare with (``git archive <rev> | tar -x -C DIR``);
its service/http/middleware.py is loaded under another name. Each variant answers the same POST
through the door around a trivial app that returns a fixed body with an ``Inference`` in the
scope (what /predict leaves there); the variants are interleaved in each round, and the best
round of each is kept (the least disturbed by the machine's other load). A wrk run cannot show
a difference of a microsecond or two; this does.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import logging
import os
import time
from pathlib import Path
from typing import Any

from starlette.types import Receive, Scope, Send

from inferpool.config import load_settings
from inferpool.service.frontdoor import Activity
from inferpool.service.http.fastpath import HANDLER
from inferpool.service.http.middleware import RequestContext
from inferpool.service.telemetry.metrics import Inference, Metrics
from inferpool.service.telemetry.observe import INFERENCE, Observer

BODY = b'{"model":"digits","outputs":{"label":3}}'


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    now = time.perf_counter()
    scope[INFERENCE] = Inference("digits", 1e-5, 1e-5, 1e-4, 1e-5, 1, marks=(now, now, now, time.monotonic()))
    scope[HANDLER] = app
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": BODY})


async def drive(door: Any, requests: int) -> float:
    message = {"type": "http.request", "body": b'{"inputs": [1, 2, 3]}', "more_body": False}
    headers = [(b"content-type", b"application/json"), (b"content-length", b"21")]  # no parent: the ratio decides

    async def receive() -> dict[str, Any]:
        return message

    async def send(_: dict[str, Any]) -> None:
        return None

    started = time.perf_counter()
    for _ in range(requests):
        scope = {"type": "http", "method": "POST", "path": "/predict", "headers": headers}
        await door(scope, receive, send)
    return (time.perf_counter() - started) / requests * 1e6


def _base_door(base: Path) -> Any:
    spec = importlib.util.spec_from_file_location("base_middleware", base / "service" / "middleware.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RequestContext(app, Metrics(), module.Activity())


def _encoding_cost(observer: Observer, requests: int = 2000) -> float:
    """The OTLP exporter's encoding of one request's spans, best of 5: work the export thread
    does off the request path, but under the GIL the event loop needs."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import SpanProcessor

    spans: list[Any] = []

    class Keep(SpanProcessor):
        def on_end(self, span: Any) -> None:
            spans.append(span)

    tracing = observer.tracing
    assert tracing is not None
    tracing.sdk.processor = Keep()
    asyncio.run(drive(RequestContext(app, Metrics(), Activity(), observer), requests))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        encode_spans(spans).SerializePartialToString()
        best = min(best, (time.perf_counter() - started) / requests * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ["OTEL_TRACES_EXPORTER"] = "none"  # the spans are made, then dropped: no export thread
    traced = Observer(load_settings(None, ["--tracing"]), Metrics().registry)
    traced.start()
    unsampled = Observer(load_settings(None, ["--tracing", "--trace-sample", "0"]), Metrics().registry)
    unsampled.start()
    logged = Observer(load_settings(None, ["--access-log"]), Metrics().registry)
    handler = logging.StreamHandler(io.StringIO())
    logging.getLogger("inferpool.access").addHandler(handler)
    logging.getLogger("inferpool.access").propagate = False
    doors = {
        "base": _base_door(args.base),
        "off": RequestContext(app, Metrics(), Activity()),
        "tracing": RequestContext(app, Metrics(), Activity(), traced),
        "unsampled": RequestContext(app, Metrics(), Activity(), unsampled),
        "access": RequestContext(app, Metrics(), Activity(), logged),
    }
    best: dict[str, float] = {}
    for round_ in range(args.rounds):
        for name, door in doors.items():
            cost = asyncio.run(drive(door, args.requests))
            best[name] = min(best.get(name, cost), cost)
            print(f"round {round_} {name:<9} {cost:7.2f} µs/request  load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"export thread: {_encoding_cost(traced):.2f} µs/request to encode the 5 spans (OTLP protobuf)")
    for name, cost in best.items():
        print(f"{name:<9} best {cost:7.2f} µs/request  {cost - best['base']:+6.2f} µs vs base")


if __name__ == "__main__":
    main()
