"""CPU per request through the server's own HTTP protocol and the lane, in process: no sockets.

    python -m loadtest.bench lane_cpu [--body v2-json|predict|resnet-v2-binary] [--connections 64]
                                      [--stub engine|door] [--chunk BYTES]
    PYTHONPATH=CHECKOUT python loadtest/bench/lane_cpu.py [...]     # another tree's inferpool

Serves the default model (no flags, one process) and opens ``--connections`` in-memory
connections on the protocol class ``inferpool serve`` runs (service/http/protocol.py) on uvloop.
Each loop wake-up feeds every connection one request, as a wake-up under load finds every socket
readable, so the lane answers them together (service/http/lane.py); the answers go to a transport
that only counts them. The figure is the process CPU per request (``time.process_time``): the
HTTP parse, the lane, decode, the front door, the engine's inline call and encode, without the
kernel's socket work (``loadtest.bench http_cpu`` measures the real server). ``--stub`` answers
every request after the first with the first one's result, to tell the parts apart: ``engine``
stubs the engine's call (``ServedModel.infer_inline``, and each request of
``infer_inline_together`` for a wake-up's requests), ``door`` the whole front door's
(``FrontDoor.infer_inline``: the engine, encode and the inference metrics; a wake-up's requests
are then answered one by one).

``--body resnet-v2-binary`` is ResNet-50's request (one 1x3x224x224 float32 image as v2 binary
tensors, ~600 KB, as ``loadtest.paired`` sends it) to a stand-in model of the same input and name
(a conv and a linear layer: use ``--stub engine`` to leave only HTTP and decode). A socket hands
such a body over in pieces: ``--chunk`` feeds each request in pieces of that many bytes, one piece
per connection per loop wake-up, and a connection whose protocol paused reading gets nothing until
it resumes, as the event loop would.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import uvicorn
import uvloop
from uvicorn.server import ServerState

from inferpool.config import load_settings
from inferpool.engine import ModelSpec
from inferpool.engine.serving.served import ServedModel
from inferpool.harness.payloads import Payload, digits_json, digits_v2_json, resnet50_v2_binary
from inferpool.harness.transport import MemoryTransport
from inferpool.service.app import create_app
from inferpool.service.frontdoor import FrontDoor
from inferpool.service.http.protocol import guarded_protocol

try:
    from inferpool.service.inline_together import Together
except ImportError:  # another checkout's, from before a wake-up's requests were held together
    Together = None  # type: ignore[assignment,misc]

BODIES: dict[str, Callable[[], Payload]] = {
    "v2-json": digits_v2_json, "predict": digits_json, "resnet-v2-binary": resnet50_v2_binary,
}  # fmt: skip
MODEL_ARGS = {"resnet-v2-binary": ("--model", f"{__name__}:image_stand_in", "--runtime.precision", "fp32")}
"""The served model's flags per body (none: the default model, digits)."""


def image_stand_in() -> ModelSpec:
    """ResNet-50's input and output (``loadtest.resnet``) around a model that costs next to nothing."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 8, stride=8), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 1000), torch.nn.Softmax(1),
    ).eval()  # fmt: skip
    return ModelSpec(model, {"image": torch.zeros(1, 3, 224, 224)}, ("probabilities",), name="resnet50")


class PausingTransport(MemoryTransport):
    """A counting transport that knows whether its protocol paused reading (the harness's own
    ignores it; defined here so that this file still runs against an older checkout)."""

    paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


STUBS: dict[str, tuple[type, tuple[str, ...]]] = {
    "engine": (ServedModel, ("infer_inline", "infer")),
    "door": (FrontDoor, ("infer_inline", "infer")),
}
"""Each stub's class and calls: the inline one (the lane's) and the awaited one (a model on
worker threads, and the ASGI path)."""


@contextmanager
def stubbed(which: str | None) -> Iterator[None]:
    """Within it, the ``which`` calls of STUBS answer every call after the first with the first
    one's result; as they were again after it (the tests run this case in their own process)."""
    if which is None:
        yield
        return
    cls, names = STUBS[which]
    reals: dict[str, Callable[..., Any]] = {name: getattr(cls, name) for name in names}
    for name, real in reals.items():
        setattr(cls, name, _replaying(real))
    held = _answered_alone(cls)
    try:
        yield
    finally:
        for name, real in reals.items():
            setattr(cls, name, real)
        for owner, name, real in held:
            setattr(owner, name, real)


def _answered_alone(cls: type) -> list[tuple[Any, str, Any]]:
    """A wake-up's requests held together (service/inline_together.py) are stubbed too: the
    engine's call for many answers each with its (stubbed) call for one, and the door's holding
    answers each at once from its (stubbed) ``infer_inline``. What was replaced, to restore."""
    owner: Any
    if cls is ServedModel and hasattr(cls, "infer_inline_together"):
        owner, name = cls, "infer_inline_together"

        def stub(self: Any, requests: list[Any]) -> list[Any]:
            return [cls.infer_inline(self, *request) for request in requests]  # type: ignore[attr-defined]

    elif cls is FrontDoor and Together is not None:
        owner, name = Together, "hold"

        def stub(self: Any, served: Any, *args: Any, then: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            return self.door.infer_inline(served, *args, **kwargs)

    else:
        return []
    real = getattr(owner, name)
    setattr(owner, name, stub)
    return [(owner, name, real)]


def _replaying(real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, answering every call after the first with the first one's result."""
    first: list[Any] = []
    if not inspect.iscoroutinefunction(real):

        def replay(*args: Any, **kwargs: Any) -> Any:
            if not first:
                first.append(real(*args, **kwargs))
            return first[0]

        return replay

    async def replay_awaited(*args: Any, **kwargs: Any) -> Any:
        if not first:
            first.append(await real(*args, **kwargs))
        return first[0]

    return replay_awaited


def pieces(request: bytes, chunk: int) -> list[bytes]:
    """``request`` as a socket's reads would hand it over: ``chunk`` bytes at a time (0: whole)."""
    if chunk <= 0:
        return [request]
    return [request[start : start + chunk] for start in range(0, len(request), chunk)]


class Connections:
    """``count`` in-memory connections on the protocol class ``inferpool serve`` runs, answers
    only counted."""

    def __init__(self, app: Any, count: int) -> None:
        config = uvicorn.Config(app, lifespan="off", log_config=None)
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Sun, 06 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
        protocol_class = guarded_protocol(10.0, count + 1)
        self.opened = []
        for _ in range(count):
            protocol = protocol_class(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
            transport = PausingTransport(keep=False)
            protocol.connection_made(transport)
            self.opened.append((protocol, transport))

    async def run(self, requests: Iterator[bytes], rounds: int, chunk: int = 0) -> int:
        """``rounds`` requests on each connection, each the next of ``requests``; a request of
        several pieces takes as many wake-ups (more while its connection is paused)."""
        opened = self.opened
        before = sum(transport.writes for _, transport in opened)
        left = [rounds] * len(opened)
        pending: list[list[bytes]] = [[] for _ in opened]  # each connection's request's pieces to come, last first
        while any(left) or any(pending):
            for index, (protocol, transport) in enumerate(opened):
                if transport.paused:
                    continue
                if not pending[index]:
                    if not left[index]:
                        continue
                    pending[index] = pieces(next(requests), chunk)[::-1]
                    left[index] -= 1
                protocol.data_received(pending[index].pop())
            await asyncio.sleep(0)  # the lane answers the wake-up's requests at its end
        for _ in range(3):  # answers on tasks (the ASGI path) take a few more turns of the loop
            await asyncio.sleep(0)
        return sum(transport.writes for _, transport in opened) - before

    async def cpu_per_request(self, requests: Iterator[bytes], rounds: int, chunk: int = 0) -> float:
        """The process CPU µs per request of ``run``; exits unless every request was answered."""
        started = time.process_time()
        answered = await self.run(requests, rounds, chunk)
        spent = (time.process_time() - started) / answered * 1e6
        if answered != rounds * len(self.opened):
            raise SystemExit(f"{answered} answers to {rounds * len(self.opened)} requests")
        return spent


async def measure(
    app: Any, request: bytes, connections: int, wakeups: int, repeats: int, chunk: int = 0
) -> list[float]:
    opened = Connections(app, connections)
    same = itertools.repeat(request)
    await opened.run(same, 20, chunk)  # warm
    return sorted([await opened.cpu_per_request(same, wakeups, chunk) for _ in range(repeats)])


def lane_cpu_parser() -> argparse.ArgumentParser:
    # Not loadtest.bench.case_parser: this file also runs on its own against another checkout.
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench lane_cpu", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--body", default="v2-json", choices=sorted(BODIES))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--wakeups", type=int, default=100, help="requests per connection per repeat (a wake-up each, whole)"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--stub", choices=sorted(STUBS), help="answer the engine's or the door's call from a cache")
    parser.add_argument(
        "--chunk", type=int, default=0, help="feed each request in pieces of this many bytes (0: whole)"
    )
    return parser


def lane_cpu(argv: list[str] | None = None) -> list[float]:
    """The CPU µs per request of each repeat, least first."""
    args = lane_cpu_parser().parse_args(argv)
    app = create_app(load_settings(None, ["--workers", "1", *MODEL_ARGS.get(args.body, ())]))
    host = app.state.host
    host.start()  # the lifespan's work, without a server to run it
    host.wait_loaded(120)
    request = BODIES[args.body]().encode("127.0.0.1", 8000)
    try:
        with stubbed(args.stub):
            found = uvloop.run(measure(app, request, args.connections, args.wakeups, args.repeats, args.chunk))
    finally:
        host.close()
    what = f"{args.body}, {args.connections} connections" + (f", {args.stub} stubbed" if args.stub else "")
    what += f", {args.chunk}-byte pieces" if args.chunk else ""
    print(f"{what}: CPU per request min {found[0]:.1f} µs, median {found[len(found) // 2]:.1f} µs")
    return found


if __name__ == "__main__":
    lane_cpu()
