"""Runs with the generator's and the server's CPU use: one rate or concurrency, or a sweep."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from inferpool.harness.payloads import Payload
from loadtest.openloop.schedule import RunConfig, run
from loadtest.openloop.stats import summarize
from loadtest.procs import tree_cpu_seconds, tree_rss_bytes


def loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM (loadtest.run raises KeyboardInterrupt for both) delivered after the
    block, not inside it: raised inside an event loop's teardown, the interrupt left the loop
    half-closed ("Cannot close a running event loop") and the run ended with a traceback
    instead of writing the finished runs."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def run_one(config: RunConfig, server_pid: int | None = None) -> dict[str, Any]:
    """Run one rate or concurrency; returns its report (with the generator's CPU use)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    server_before = tree_cpu_seconds(server_pid) if server_pid else 0.0
    wall = time.perf_counter()
    runner = loop_runner()
    try:
        record, t0, t_end = runner.run(run(config))
    finally:
        with _interrupts_held():
            runner.close()
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    report = summarize(config, record, t0, t_end)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    answered = max(1, len(record.done))
    report["generator_cpu"] = {
        "cores": round(cpu / wall, 3),
        "us_per_request": round(cpu / answered * 1e6, 1),
        "affinity": sorted(os.sched_getaffinity(0)),
    }
    if server_pid:
        report["server_cpu_cores"] = round((tree_cpu_seconds(server_pid) - server_before) / wall, 3)
        report["server_rss_mb"] = round(tree_rss_bytes(server_pid) / 2**20, 1)
    return report


def sweep(
    url: str,
    payload: Payload,
    *,
    rates: Sequence[float] = (),
    concurrencies: Sequence[int] = (),
    server_pid: int | None = None,
    label: str = "",
    **options: Any,
) -> list[dict[str, Any]]:
    runs = []
    for rate in rates:
        runs.append(run_one(RunConfig(url, payload, rate=rate, label=label, **options), server_pid))
    for concurrency in concurrencies:
        runs.append(run_one(RunConfig(url, payload, concurrency=concurrency, label=label, **options), server_pid))
    return runs
