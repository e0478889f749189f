"""Closed-loop clients calling ``ServedModel.infer`` directly (no HTTP), for engine benchmarks."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence

from inferpool.engine import ServedModel


async def closed_loop(
    model: ServedModel, payloads: Sequence[object], clients: int, seconds: float, warmup: float
) -> dict[str, float]:
    """Each client sends the next payload as soon as it has its answer (client ``c`` starts at
    payload ``c``). Returns calls/s, p50/p99 latency in ms and the mean batch each call rode in;
    the warm-up is excluded."""
    latencies: list[float] = []
    batches: list[int] = []

    async def client(index: int, until: float, record: bool) -> None:
        clock, i = time.perf_counter, index
        while clock() < until:
            started = clock()
            prediction = await model.infer(payloads[i % len(payloads)])
            i += 1
            if record:
                latencies.append(clock() - started)
                batches.append(prediction.batch_size)

    warm_until = time.perf_counter() + warmup
    await asyncio.gather(*(client(c, warm_until, False) for c in range(clients)))
    started = time.perf_counter()
    await asyncio.gather(*(client(c, started + seconds, True) for c in range(clients)))
    elapsed = time.perf_counter() - started
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "rate": len(latencies) / elapsed,
        "p50_ms": cuts[49] * 1e3,
        "p99_ms": cuts[98] * 1e3,
        "batch": statistics.fmean(batches),
    }
