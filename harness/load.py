"""A packaged load generator: closed loop (``concurrency`` clients, each sending again once
answered) or open loop (request *i* due at ``t0 + i / rate``, its latency counted from then,
so that a server falling behind is charged for the wait), over keep-alive connections
(``inferpool.harness.client.Connection``) opened before the clock starts.

``drive`` runs a warm-up that is not recorded, then a measured window, and calls ``check`` on
the window so far every ``every`` seconds: it returns True to stop early (``inferpool tune``
stops trials that cannot win). Requests still in flight at the end are not counted.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import numpy as np

from inferpool.harness.client import Connection
from inferpool.harness.payloads import Payload

HOST = "127.0.0.1"
P = ParamSpec("P")
T = TypeVar("T")
ERROR_PAUSE = 0.005  # after a failed exchange, so that a refusing server does not spin the loop


@dataclass(frozen=True)
class Workload:
    """What to send and how: ``requests`` are sent in turn; exactly one of ``concurrency``
    (closed loop) and ``rate`` (open loop, requests per second) is set."""

    requests: Sequence[Payload]
    concurrency: int | None = None
    rate: float | None = None
    connections: int = 0
    """Open loop: connections to send on (0 = enough for the rate at 50 ms a request)."""

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None) or not self.requests:
            raise ValueError("a workload needs requests and exactly one of concurrency and rate")

    def pool_size(self) -> int:
        if self.concurrency is not None:
            return self.concurrency
        assert self.rate is not None
        return self.connections or max(4, min(512, math.ceil(self.rate * 0.05)))


@dataclass(frozen=True)
class Summary:
    """A window's figures: answers 200 (``ok``) and anything else (``errors``: other statuses
    and connection failures), ok answers per second, latency percentiles in ms (None without
    answers)."""

    seconds: float
    ok: int
    errors: int
    throughput: float
    p50_ms: float | None
    p99_ms: float | None


@dataclass
class Window:
    """What the measured window has seen so far."""

    start: float
    latencies: list[float] = field(default_factory=list)  # seconds, ok answers only
    errors: int = 0
    end: float | None = None

    def elapsed(self) -> float:
        return (self.end if self.end is not None else time.perf_counter()) - self.start

    def over(self, seconds: float) -> int:
        """Ok answers slower than ``seconds``."""
        return int(np.count_nonzero(np.asarray(self.latencies) > seconds))

    def summary(self) -> Summary:
        elapsed = max(self.elapsed(), 1e-9)
        ms = np.asarray(self.latencies) * 1e3
        p50, p99 = (float(np.percentile(ms, q)) for q in (50, 99)) if ms.size else (None, None)
        return Summary(round(elapsed, 3), int(ms.size), self.errors, len(self.latencies) / elapsed, p50, p99)


async def drive(
    port: int,
    workload: Workload,
    warmup: float,
    duration: float,
    check: Callable[[Window], bool] | None = None,
    every: float = 0.5,
) -> Window:
    """Load 127.0.0.1:``port`` for ``warmup`` + ``duration`` seconds; the measured window."""
    encoded = [payload.encode(HOST, port) for payload in workload.requests]
    connections = [Connection(HOST, port) for _ in range(workload.pool_size())]
    await asyncio.gather(*(c.open() for c in connections))
    clock = time.perf_counter
    t0 = clock()
    window = Window(start=t0 + warmup)
    issued = [0]  # requests taken so far: the next one's index (and payload)

    def take() -> int:
        index = issued[0]
        issued[0] += 1
        return index

    async def exchange(conn: Connection, index: int, intended: float) -> None:
        try:
            status = await conn.exchange(encoded[index % len(encoded)])
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            conn.close()  # reopened by the next exchange
            status = 0
        done = clock()
        if done >= window.start:
            if status == 200:
                window.latencies.append(done - intended)
            else:
                window.errors += 1
        if status != 200:
            await asyncio.sleep(ERROR_PAUSE)

    async def closed(conn: Connection) -> None:
        while True:
            await exchange(conn, take(), clock())

    async def opened(conn: Connection) -> None:
        assert workload.rate is not None
        while True:
            index = take()
            intended = t0 + index / workload.rate
            # Timers may fire a little early: sleep again rather than send before time.
            while (delay := intended - clock()) > 0:
                await asyncio.sleep(delay)
            await exchange(conn, index, intended)

    worker = closed if workload.concurrency is not None else opened
    tasks = [asyncio.ensure_future(worker(c)) for c in connections]
    try:
        await asyncio.sleep(warmup)
        window.start = clock()
        window.latencies.clear()
        window.errors = 0
        end = window.start + duration
        while (now := clock()) < end:
            await asyncio.sleep(min(every, end - now))
            if check is not None and clock() < end and check(window):
                break
        window.end = clock()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in connections:
            conn.close()
    return window


def blocking(function: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """``function`` run to the end on a fresh event loop (uvloop when installed, as the server's)."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            import uvloop

            factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
        except ImportError:  # uvloop comes with uvicorn[standard]; asyncio's own loop is the fallback
            factory = None
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(function(*args, **kwargs))

    return run


run_load = blocking(drive)
"""``drive`` from synchronous code: ``run_load(port, workload, warmup, duration, check)``."""
