"""CPU per request through the whole ASGI app in-process: no sockets, no server loop.

    python -m loadtest.bench app_cpu [--path /predict|/v2/models/digits/infer] [--repeats 7] [--bare]
    PYTHONPATH=CHECKOUT python loadtest/bench/app_cpu.py [...]     # another tree's inferpool

Serves the default model (no flags, one process), warms it, then awaits the app with a
prebuilt ``POST`` scope ``--requests`` times per repeat and reports the process CPU per request
(``time.process_time``: what the app's own Python costs, less disturbed by other load on the
machine than throughput). Run it for two checkouts alternately (``PYTHONPATH=CHECKOUT``) to
compare a change to the hot path against the revision before it. ``--bare``: the same loop
around the limit of issue 32 (``loadtest.peers.bare_handler``: an ASGI function, orjson, the same
ONNX export through onnxruntime inline), what InferPool's in-process figure is held against.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson

from inferpool.config import load_settings
from inferpool.service.app import create_app

BODIES = {
    "/predict": orjson.dumps({"inputs": [[[0.0] * 8] * 8]}),
    "/v2/models/digits/infer": orjson.dumps(
        {"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]}
    ),
}


async def drive(app: Any, path: str, requests: int) -> list[int]:
    body = BODIES[path]
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    message = {"type": "http.request", "body": body, "more_body": False}
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return message

    async def send(sent: dict[str, Any]) -> None:
        if sent["type"] == "http.response.start":
            statuses.append(sent["status"])

    for _ in range(requests):
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
        }  # fmt: skip
        await app(scope, receive, send)
    return statuses


async def measure(app: Any, path: str, requests: int, repeats: int) -> list[float]:
    await drive(app, path, requests)  # warm: the fast path and the metrics' slots are built
    found = []
    for _ in range(repeats):
        started = time.process_time()
        statuses = await drive(app, path, requests)
        found.append((time.process_time() - started) / requests * 1e6)
        if set(statuses) != {200}:
            raise SystemExit(f"answers other than 200: {sorted(set(statuses))}")
    return sorted(found)


def app_cpu_parser() -> argparse.ArgumentParser:
    # Not loadtest.bench.case_parser: this file also runs on its own against another checkout.
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench app_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--path", default="/predict", choices=sorted(BODIES))
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--bare", action="store_true",
        help="drive the limit instead (loadtest/peers/bare_handler.py's ASGI function, /predict only)",
    )  # fmt: skip
    return parser


def app_cpu(argv: list[str] | None = None) -> list[float]:
    """The CPU µs per request of each repeat, least first."""
    args = app_cpu_parser().parse_args(argv)
    if args.bare:
        from loadtest.peers import bare_handler

        bare = bare_handler.make_app(bare_handler.export())
        found = asyncio.run(measure(bare, "/predict", args.requests, args.repeats))
        print(f"bare handler /predict: CPU per request min {found[0]:.1f} µs, median {found[len(found) // 2]:.1f} µs")
        return found
    app = create_app(load_settings(None, ["--workers", "1"]))
    host = app.state.host
    host.start()  # the lifespan's work, without a server to run it
    host.wait_loaded(120)
    try:
        found = asyncio.run(measure(app, args.path, args.requests, args.repeats))
    finally:
        host.close()
    print(f"{args.path}: CPU per request min {found[0]:.1f} µs, median {found[len(found) // 2]:.1f} µs")
    return found


if __name__ == "__main__":
    app_cpu()
