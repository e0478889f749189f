"""gRPC ModelInfer (on each gRPC front end) against HTTP v2 binary and HTTP JSON on the digits model.

Two servers, one per gRPC front end (--grpc-server native and grpcio), each one serving process
pinned to CPU 0 (only one is called at a time; HTTP is measured on the first); the callers run in this process on CPU 1,
so the server's figures are its own. For each protocol and concurrency (closed loop, 1 and 8
callers, interleaved over rounds) it reports calls/s, p50/p99 as the caller saw them, and the
server's CPU time per call, minus the model's own time per call: the per-call overhead of the
protocol, which does not depend on how fast the caller is. Each caller has its own connection
(HTTP) or channel (gRPC), and sends a request encoded once.

Two last rows are floors: "grpcio echo", of any grpcio server here, a grpc.aio server on uvloop
whose handler returns the request's bytes, pinned like the server (no InferPool, no model); and
"native echo", the native front end's own transport (service/grpc/native.py: its thread, its
hand-off to the loop, a task and the answer per call) around the same echo.

    python -m loadtest.bench grpc [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import grpc
import httpx2
import numpy as np
import uvloop

from inferpool.harness.client import Connection
from inferpool.harness.metrics import metric_total
from inferpool.harness.payloads import grpc_request, json_request, v2_request
from inferpool.harness.server import free_port, inferpool_serve, launch
from inferpool.service.grpc.native import NativeFrontEnd
from inferpool.service.grpc.servicer import Served
from loadtest.bench import case_parser
from loadtest.procs import tree_cpu_seconds

GRPC_SERVERS = ("native", "grpcio")  # config/grpc.py
ECHOES = ("grpcio echo", "native echo")
INFER = "/inference.GRPCInferenceService/ModelInfer"
IMAGE = np.random.default_rng(0).integers(0, 17, size=(1, 1, 8, 8)).astype(np.float32)
Call = Callable[[], Awaitable[object]]


async def grpc_callers(target: str, n: int) -> tuple[list[Call], Callable[[], Awaitable[None]]]:
    body = grpc_request("digits", {"image": IMAGE})
    channels = [grpc.aio.insecure_channel(target) for _ in range(n)]
    calls: list[Call] = []
    for channel in channels:
        await channel.channel_ready()
        # Bytes in, bytes out: no (de)serialising on the caller.
        rpc: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(INFER)

        def call(rpc: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = rpc) -> Awaitable[object]:
            return rpc(body)

        calls.append(call)

    async def close() -> None:
        for channel in channels:
            await channel.close()

    return calls, close


async def echo_server(port: int) -> None:
    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    server = grpc.aio.server()
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(echo)  # bytes in and out
    service = grpc.method_handlers_generic_handler(INFER.split("/")[1], {"ModelInfer": handler})
    server.add_generic_rpc_handlers((service,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


class _Raw(bytes):
    """A "message" that is its own wire bytes: the echo's request and response."""

    @classmethod
    def FromString(cls, data: bytes) -> _Raw:
        return cls(data)

    def SerializeToString(self) -> bytes:
        return bytes(self)


async def native_echo_server(port: int) -> None:
    async def echo(request: _Raw, context: object) -> _Raw:
        return request

    servicer: Any = SimpleNamespace(
        methods=lambda: {"ModelInfer": Served(echo, _Raw, _Raw)}, infer_now=lambda request, context: None
    )
    host: Any = SimpleNamespace(status="ready")
    front = NativeFrontEnd(servicer, host, f"127.0.0.1:{port}", 1 << 30)
    await front.start()
    await asyncio.Event().wait()


async def http_callers(port: int, n: int, binary: bool) -> tuple[list[Call], Callable[[], Awaitable[None]]]:
    payload = v2_request("digits", {"image": IMAGE}) if binary else json_request(IMAGE[0])
    request = payload.encode("127.0.0.1", port)
    connections = [Connection("127.0.0.1", port) for _ in range(n)]
    for connection in connections:
        await connection.open()

    async def close() -> None:
        for connection in connections:
            connection.close()

    def caller(connection: Connection) -> Call:
        return lambda: connection.exchange(request)

    return [caller(c) for c in connections], close


async def closed_loop(calls: list[Call], seconds: float) -> list[float]:
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def caller(call: Call) -> None:
        while (started := time.perf_counter()) < end:
            await call()
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(caller(call) for call in calls))
    return latencies


def model_seconds(url: str | None) -> tuple[float, float]:
    if url is None:  # the echo server runs no model
        return 0.0, 0.0
    text = httpx2.get(url + "/metrics").text
    return (
        metric_total(text, "inferpool_inference_seconds_sum", model="digits"),
        metric_total(text, "inferpool_inference_seconds_count", model="digits"),
    )


async def row(kind: str, n: int, seconds: float, url: str | None, port: int, target: str, pid: int) -> dict[str, float]:
    if kind.startswith("grpc") or kind == "native echo":
        calls, close = await grpc_callers(target, n)
    else:
        calls, close = await http_callers(port, n, binary=kind == "http v2 binary")
    await closed_loop(calls, 0.5)  # warm the connections
    model_before, count_before = model_seconds(url)
    cpu_before = tree_cpu_seconds(pid)
    latencies = await closed_loop(calls, seconds)
    cpu = tree_cpu_seconds(pid) - cpu_before
    model_after, count_after = model_seconds(url)
    await close()
    done = len(latencies)
    model_per_call = (model_after - model_before) / max(1.0, count_after - count_before)
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "calls_per_s": done / seconds,
        "p50_us": cuts[49] * 1e6,
        "p99_us": cuts[98] * 1e6,
        "server_cpu_us": cpu / done * 1e6,
        "overhead_us": (cpu / done - model_per_call) * 1e6,
    }


def grpc_case_parser() -> argparse.ArgumentParser:
    parser = case_parser("grpc", __doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--echo-server", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the floors' servers
    parser.add_argument("--echo-kind", default="grpcio", help=argparse.SUPPRESS)
    return parser


def grpc_case(argv: list[str] | None = None) -> None:
    args = grpc_case_parser().parse_args(argv)
    if args.echo_server:
        uvloop.run((echo_server if args.echo_kind == "grpcio" else native_echo_server)(args.echo_server))
        return
    grpc_ports = {server: free_port() for server in GRPC_SERVERS}
    kinds = (*(f"grpc {server}" for server in GRPC_SERVERS), "http v2 binary", "http json", *ECHOES)
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    commands = [
        inferpool_serve("--workers", "1", "--grpc-port", str(port), "--grpc-server", server)
        for server, port in grpc_ports.items()
    ]
    echo_ports = {kind: free_port() for kind in ECHOES}
    echoes = {}
    for kind, port in echo_ports.items():
        argv = [
            sys.executable,
            "-m",
            "loadtest.bench",
            "grpc",
            "--echo-server",
            str(port),
            "--echo-kind",
            kind.split()[0],
        ]
        echoes[kind] = subprocess.Popen(["taskset", "-c", "0", *argv])
    try:
        with contextlib.ExitStack() as stack:
            servers = [stack.enter_context(launch(command, cpus=[0])) for command in commands]
            server = servers[0]
            os.sched_setaffinity(0, {1})
            targets: dict[
                str, tuple[str | None, str, int]
            ] = {  # (metrics URL, gRPC target, pid); HTTP: the first server
                f"grpc {name}": (each.url, f"127.0.0.1:{grpc_ports[name]}", each.process.pid)
                for name, each in zip(GRPC_SERVERS, servers, strict=True)
            }
            for kind, port in echo_ports.items():
                targets[kind] = (None, f"127.0.0.1:{port}", echoes[kind].pid)
            for _ in range(args.rounds):
                for n in (1, 8):
                    for kind in kinds:
                        url, target, pid = targets.get(kind, (server.url, "", server.process.pid))
                        figures = uvloop.run(row(kind, n, args.seconds, url, server.port, target, pid))
                        results.setdefault((kind, n), []).append(figures)
    finally:
        for echo in echoes.values():
            echo.terminate()
            echo.wait()
    print("| callers | protocol | calls/s | p50 µs | p99 µs | server CPU µs/call | overhead µs/call |")
    print("|---|---|---|---|---|---|---|")
    for (kind, n), rounds in sorted(results.items(), key=lambda item: (item[0][1], kinds.index(item[0][0]))):
        med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        print(
            f"| {n} | {kind} | {med['calls_per_s']:,.0f} | {med['p50_us']:,.0f} | {med['p99_us']:,.0f} "
            f"| {med['server_cpu_us']:,.0f} | {med['overhead_us']:,.0f} |"
        )
