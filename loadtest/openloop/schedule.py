"""One run's schedule: open loop (request *i* due at ``t0 + i / rate``, its latency from then)
or closed loop (each connection sends again once answered), over a pool of keep-alive
connections opened before the clock starts; every request's intended, sent and done times."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from inferpool.harness.client import Connection
from inferpool.harness.payloads import Payload


@dataclass
class Record:
    intended: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)  # 0: connection error
    started: list[float] = field(default_factory=list)  # intended time of every request sent
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class RunConfig:
    url: str
    payload: Payload
    duration: float = 10.0
    warmup: float = 2.0
    rate: float | None = None  # open loop
    concurrency: int | None = None  # closed loop
    latency_budget: float = 0.05
    max_connections: int = 512
    connections: int | None = None
    drain: float = 10.0
    max_requests: int = 2_000_000
    label: str = ""

    def mode(self) -> str:
        return "open" if self.rate is not None else "closed"

    def pool_size(self) -> int:
        if self.concurrency is not None:
            return self.concurrency
        if self.connections is not None:
            return self.connections
        assert self.rate is not None
        return max(4, min(self.max_connections, math.ceil(self.rate * self.latency_budget)))


async def run(config: RunConfig) -> tuple[Record, float, float]:
    parts = urlsplit(config.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"load only goes to 127.0.0.1, not {host}")
    request = config.payload.encode(host, port)
    connections = [Connection(host, port) for _ in range(config.pool_size())]
    await asyncio.gather(*(c.open() for c in connections))
    record = Record()
    clock = time.perf_counter
    t0 = clock() + 0.05
    t_end = t0 + config.warmup + config.duration
    budget = [config.max_requests]
    next_index = [0]

    async def exchange(conn: Connection, intended: float) -> None:
        record.started.append(intended)
        sent = clock()
        try:
            status = await conn.exchange(request)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            record.errors[type(exc).__name__] += 1
            conn.close()
            status = 0
            await asyncio.sleep(0.001)  # a refused connection must not spin the loop
        record.intended.append(intended)
        record.sent.append(sent)
        record.done.append(clock())
        record.status.append(status)

    async def open_worker(conn: Connection) -> None:
        assert config.rate is not None
        interval = 1.0 / config.rate
        while budget[0] > 0:
            i = next_index[0]
            next_index[0] += 1
            intended = t0 + i * interval
            if intended >= t_end:
                return
            budget[0] -= 1
            # The loop's timers may fire up to a millisecond early (its clock resolution): sleep
            # again rather than send before the intended time (a CI run measured a 20 ms answer
            # as 18.9 ms from its intended time).
            while (delay := intended - clock()) > 0:
                await asyncio.sleep(delay)
            await exchange(conn, intended)

    async def closed_worker(conn: Connection) -> None:
        delay = t0 - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        while budget[0] > 0:
            now = clock()
            if now >= t_end:
                return
            budget[0] -= 1
            await exchange(conn, now)

    worker = open_worker if config.rate is not None else closed_worker
    tasks = [asyncio.ensure_future(worker(c)) for c in connections]
    _, pending = await asyncio.wait(tasks, timeout=t_end - clock() + config.drain)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for conn in connections:
        conn.close()
    return record, t0, t_end
