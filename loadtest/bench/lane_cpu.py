"""CPU per request through the server's own HTTP protocol and the lane, in process: no sockets.

    python -m loadtest.bench lane_cpu [--body v2-json|predict] [--connections 64] [--stub engine|door]
    PYTHONPATH=CHECKOUT python loadtest/bench/lane_cpu.py [...]     # another tree's inferpool

Serves the default model (no flags, one process) and opens ``--connections`` in-memory
connections on the protocol class ``inferpool serve`` runs (service/http/protocol.py) on uvloop.
Each loop wake-up feeds every connection one request, as a wake-up under load finds every socket
readable, so the lane answers them together (service/http/lane.py); the answers go to a transport
that only counts them. The figure is the process CPU per request (``time.process_time``): the
HTTP parse, the lane, decode, the front door, the engine's inline call and encode, without the
kernel's socket work (``loadtest.bench http_cpu`` measures the real server). ``--stub`` answers
every request after the first with the first one's result, to tell the parts apart: ``engine``
stubs the engine's call (``ServedModel.infer_inline``, and ``infer_inline_together`` for a
wake-up's requests), ``door`` the whole front door's (``FrontDoor.infer_inline``: the engine,
encode and the inference metrics; a wake-up's requests are then answered one by one).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
import uvloop
from uvicorn.server import ServerState

from inferpool.config import load_settings
from inferpool.engine.serving.served import ServedModel
from inferpool.harness.payloads import digits_json, digits_v2_json
from inferpool.harness.transport import MemoryTransport
from inferpool.service.app import create_app
from inferpool.service.frontdoor import FrontDoor
from inferpool.service.http.protocol import guarded_protocol

try:
    from inferpool.service.inline_together import Together
except ImportError:  # another checkout's, from before a wake-up's requests were held together
    Together = None  # type: ignore[assignment,misc]

BODIES = {"v2-json": digits_v2_json, "predict": digits_json}
STUBS: dict[str, tuple[type, str, str]] = {
    "engine": (ServedModel, "infer_inline", "infer_inline_together"),
    "door": (FrontDoor, "infer_inline", ""),
}
"""Each stub's class, its call for one request, and its call for a wake-up's requests together
(service/inline_together.py): the door's holds them and answers each from ``infer_inline``."""


@contextmanager
def stubbed(which: str | None) -> Iterator[None]:
    """Within it, the ``which`` call of STUBS answers every call after the first with the first
    one's result (the call for many: each request with it); as it was again after it (the tests
    run this case in their own process)."""
    if which is None:
        yield
        return
    cls, name, many = STUBS[which]
    real: Callable[..., Any] = getattr(cls, name)
    first: list[Any] = []

    def replay(*args: Any, **kwargs: Any) -> Any:
        if not first:
            first.append(real(*args, **kwargs))
        return first[0]

    def replay_many(self: Any, requests: list[Any]) -> list[Any]:
        return [replay(self, *request) for request in requests]

    def hold_none(self: Together, served: Any, *args: Any, then: Any, **kwargs: Any) -> Any:
        return replay(self.door, served, *args, **kwargs)  # answered now: nothing is held

    patched: list[tuple[Any, str, Any]] = [(cls, name, replay)]
    if many and hasattr(cls, many):
        patched.append((cls, many, replay_many))
    elif not many and Together is not None:
        patched.append((Together, "hold", hold_none))
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patched]
    for owner, attr, stub in patched:
        setattr(owner, attr, stub)
    try:
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


async def measure(app: Any, request: bytes, connections: int, wakeups: int, repeats: int) -> list[float]:
    config = uvicorn.Config(app, lifespan="off", log_config=None)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Sun, 06 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
    protocol_class = guarded_protocol(10.0, connections + 1)
    opened = []
    for _ in range(connections):
        protocol = protocol_class(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
        transport = MemoryTransport(keep=False)
        protocol.connection_made(transport)
        opened.append((protocol, transport))

    async def run(rounds: int) -> int:
        before = sum(transport.writes for _, transport in opened)
        for _ in range(rounds):
            for protocol, _ in opened:
                protocol.data_received(request)
            await asyncio.sleep(0)  # the lane answers the wake-up's requests at its end
        return sum(transport.writes for _, transport in opened) - before

    await run(20)  # warm
    found = []
    for _ in range(repeats):
        started = time.process_time()
        answered = await run(wakeups)
        found.append((time.process_time() - started) / answered * 1e6)
        if answered != wakeups * connections:
            raise SystemExit(f"{answered} answers to {wakeups * connections} requests")
    return sorted(found)


def lane_cpu_parser() -> argparse.ArgumentParser:
    # Not loadtest.bench.case_parser: this file also runs on its own against another checkout.
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench lane_cpu", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--body", default="v2-json", choices=sorted(BODIES))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--wakeups", type=int, default=100, help="loop wake-ups per repeat, a request per connection each"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--stub", choices=sorted(STUBS), help="answer the engine's or the door's call from a cache")
    return parser


def lane_cpu(argv: list[str] | None = None) -> list[float]:
    """The CPU µs per request of each repeat, least first."""
    args = lane_cpu_parser().parse_args(argv)
    app = create_app(load_settings(None, ["--workers", "1"]))
    host = app.state.host
    host.start()  # the lifespan's work, without a server to run it
    host.wait_loaded(120)
    request = BODIES[args.body]().encode("127.0.0.1", 8000)
    try:
        with stubbed(args.stub):
            found = uvloop.run(measure(app, request, args.connections, args.wakeups, args.repeats))
    finally:
        host.close()
    what = f"{args.body}, {args.connections} connections" + (f", {args.stub} stubbed" if args.stub else "")
    print(f"{what}: CPU per request min {found[0]:.1f} µs, median {found[len(found) // 2]:.1f} µs")
    return found


if __name__ == "__main__":
    lane_cpu()
