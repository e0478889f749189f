"""What observability costs per request: the door's own cost in process (``door_cost``), and
tracing, the access log and the payload log on real servers (``observe``).

    python -m loadtest.bench door_cost [--base DIR] [--requests 20000] [--rounds 5]
    python -m loadtest.bench observe [--base DIR] [--rounds 3] [--seconds 8] [--connections 8 64]

``DIR``: a checkout of the revision to compare with (``git archive <rev> | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from starlette.types import Receive, Scope, Send

from inferpool.config import load_settings
from inferpool.harness.payloads import digits_json
from inferpool.harness.server import INFERPOOL, free_port, inferpool_serve, launch
from inferpool.service.frontdoor import Activity
from inferpool.service.http.fastpath import HANDLER
from inferpool.service.http.middleware import RequestContext
from inferpool.service.telemetry.metrics import Inference, Metrics
from inferpool.service.telemetry.observe import INFERENCE, Observer
from loadtest import wrk
from loadtest.bench import case_parser

DOOR_COST_DOC = """The door's own cost per request, in process: today's ``RequestContext`` against this one with
observability off, tracing on (sample 1.0: 5 spans made and handed to a processor that drops
them, so the export's encoding is not in it), tracing on at sample 0 (what an unsampled request
costs), and the access log on (to a null stream).

    python -m loadtest.bench door_cost [--base DIR] [--requests 20000] [--rounds 5]

``DIR`` is a checkout of the revision to compare with (``git archive <rev> | tar -x -C DIR``);
its service/http/middleware.py (or service/middleware.py, before service/http/) is loaded
under another name; without ``--base`` the variants are compared with ``off``. Each variant answers the same POST
through the door around a trivial app that returns a fixed body with an ``Inference`` in the
scope (what /predict leaves there); the variants are interleaved in each round, and the best
round of each is kept (the least disturbed by the machine's other load). A wrk run cannot show
a difference of a microsecond or two; this does.
"""

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
    found = [path for path in (base / "service/http/middleware.py", base / "service/middleware.py") if path.exists()]
    if not found:
        raise SystemExit(f"{base}: neither service/http/middleware.py nor service/middleware.py")
    spec = importlib.util.spec_from_file_location("base_middleware", found[0])
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


def door_cost_parser() -> argparse.ArgumentParser:
    parser = case_parser("door_cost", DOOR_COST_DOC)
    parser.add_argument("--base", type=Path, help="a checkout of the revision to compare with")
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    return parser


def door_cost(argv: list[str] | None = None) -> dict[str, float]:
    """Best µs per request of each variant, and ``encode`` (the export thread's, per request)."""
    args = door_cost_parser().parse_args(argv)
    access = logging.getLogger("inferpool.access")
    handler = logging.StreamHandler(io.StringIO())
    exporter = os.environ.get("OTEL_TRACES_EXPORTER")
    os.environ["OTEL_TRACES_EXPORTER"] = "none"  # the spans are made, then dropped: no export thread
    observers: list[Observer] = []
    propagate, access.propagate = access.propagate, False
    access.addHandler(handler)
    try:  # the environment, the access logger and the tracers are the caller's again afterwards
        traced = Observer(load_settings(None, ["--tracing"]), Metrics().registry)
        unsampled = Observer(load_settings(None, ["--tracing", "--trace-sample", "0"]), Metrics().registry)
        logged = Observer(load_settings(None, ["--access-log"]), Metrics().registry)
        for observer in (traced, unsampled):
            observer.start()
            observers.append(observer)
        return _door_cost(args, traced, unsampled, logged)
    finally:
        for observer in observers:
            observer.stop()
        access.removeHandler(handler)
        access.propagate = propagate
        if exporter is None:
            os.environ.pop("OTEL_TRACES_EXPORTER", None)
        else:
            os.environ["OTEL_TRACES_EXPORTER"] = exporter


def _door_cost(args: argparse.Namespace, traced: Observer, unsampled: Observer, logged: Observer) -> dict[str, float]:
    doors = {
        **({"base": _base_door(args.base)} if args.base else {}),
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
    encode = _encoding_cost(traced, min(args.requests, 2000))
    print(f"export thread: {encode:.2f} µs/request to encode the 5 spans (OTLP protobuf)")
    against = "base" if args.base else "off"
    for name, cost in best.items():
        print(f"{name:<9} best {cost:7.2f} µs/request  {cost - best[against]:+6.2f} µs vs {against}")
    return best | {"encode": encode}


OBSERVE_DOC = """What tracing, the access log and the payload log cost per request, and that all-off costs nothing.

    python -m loadtest.bench observe [--base DIR] [--rounds 3] [--seconds 8] [--connections 8 64]

One serving process per variant, all started first (idle ones cost nothing) with the backend
and dispatch auto picks on digits pinned (onnxruntime, inline), so every variant serves the
same way; then rounds of wrk on /predict JSON, the variants interleaved within each round so
that a change in the machine's load hits all of them alike. Variants: ``off`` (this checkout,
no observability flag), ``base`` (the checkout at ``--base``, e.g. ``git archive <rev> | tar
-x -C DIR``: today's server), ``tracing`` (sample 1.0, every request a trace of 5 spans,
exported over OTLP/HTTP to an in-process collector), ``access`` (the access log, JSON, to the
server's log file), ``payload`` (the payload log at sample 1.0 to a JSON-lines file). The
cost per request is the difference of 1/throughput with ``off`` (the server is one process
on the event loop: its time per request)."""

PINNED = ("--workers", "1", "--runtime.backend", "onnxruntime", "--runtime.dispatch", "inline")


def observe_parser() -> argparse.ArgumentParser:
    parser = case_parser("observe", OBSERVE_DOC)
    parser.add_argument("--base", type=Path, help="a checkout of the revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[8, 64])
    return parser


def observe(argv: list[str] | None = None) -> None:
    args = observe_parser().parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-observe-"))
    collector_port = free_port()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    variants: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
        "off": ((), {}),
        "tracing": (("--tracing", "--trace-sample", "1.0"), otel),
        "access": (("--access-log", "--log-format", "json"), {}),
        "payload": (("--payload-log", str(scratch / "payloads.jsonl")), {}),
    }
    if args.base is not None:
        variants["base"] = ((), {"PYTHONPATH": str(args.base.resolve())})
    from tests.support.otlp_collector import http_collector  # the tests' receiver: spans are decoded

    with contextlib.ExitStack() as stack:
        collected = stack.enter_context(http_collector(collector_port))
        servers = {}
        for name, (flags, env) in variants.items():
            program = (INFERPOOL,) if name != "base" else (sys.executable, "-m", "inferpool.cli.main")
            command = inferpool_serve(*PINNED, *flags, program=program)
            servers[name] = stack.enter_context(launch(command, scratch, name=name, env=env))
        print(f"load {os.getloadavg()}; {' '.join(PINNED)}", flush=True)
        rates: dict[tuple[str, int], list[float]] = {}
        for round_ in range(args.rounds):
            for connections in args.connections:
                for name, server in servers.items():
                    run = wrk.run_one(server.url, digits_json(), connections, duration=args.seconds, warmup=1,
                                      label=name, server_pid=server.process.pid, scratch=scratch)  # fmt: skip
                    rates.setdefault((name, connections), []).append(run["achieved_rps"])
                    p50, p99 = run["latency_ms"]["p50"], run["latency_ms"]["p99"]
                    print(f"round {round_} c={connections:<3} {name:<8} {run['achieved_rps']:>8.0f} req/s  "
                          f"p50 {p50:.3f} ms  p99 {p99:.3f} ms  load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        print(f"collector received {len(collected.spans)} spans")
        for connections in args.connections:
            off = max(rates["off", connections])
            for name in variants:
                best = max(rates[name, connections])
                cost = (1 / best - 1 / off) * 1e6
                print(f"c={connections:<3} {name:<8} best {best:>8.0f} req/s  {cost:+7.1f} µs/request vs off")
