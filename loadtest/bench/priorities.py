"""Request priorities at twice the capacity (docs/traffic.md): success rate and p99 of the high
level against the low one, on a real server.

    python -m loadtest.bench priorities [--seconds 15] [--rounds 3]

The digits model made 20 ms slower per call (tests.support.slow_model:slow_calls: a capacity
that does not move with the host), one serving process on two worker threads, ``max_queue = 16``
(so that the overload is shed within seconds rather than queued), ``priority_levels = 2``. The
offered load is an open loop at twice what the server answers at saturation (measured
first, closed loop, with every request at one level), half the requests ``X-Request-Priority: 1``
and half ``2``, interleaved. Each level's success rate (200s of those sent) and p99 (of its 200s,
counted from when each was due) are reported; then the same with priorities off (one level) as
the baseline both levels would share.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from inferpool.harness.load import Summary, Workload, blocking, drive
from inferpool.harness.payloads import DIGIT, Payload, json_request
from inferpool.harness.server import inferpool_serve, launch
from loadtest.bench import case_parser

SERVE = (
    "--model", "tests.support.slow_model:slow_calls", "--workers", "1", "--runtime.backend", "eager",
    "--runtime.dispatch", "threads", "--runtime.num-runtimes", "2", "--max-queue", "16",
)  # fmt: skip


CONNECTIONS = 64
"""Per level: more than the server holds, so that the open loop's requests are in flight when due
rather than waiting for a free connection."""


def leveled(level: int) -> Payload:
    body = json_request(DIGIT.astype(int))
    return Payload(body.path, body.body, (*body.headers, ("x-request-priority", str(level))))


def priorities_parser() -> argparse.ArgumentParser:
    parser = case_parser("priorities", __doc__)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--overload", type=float, default=2.0, help="offered load over saturation")
    return parser


async def _levels(port: int, rate: float, warmup: float, seconds: float) -> dict[int, Summary]:
    """Both levels at ``rate / 2`` each, at once: one open loop per level."""
    windows = await asyncio.gather(
        *(
            drive(port, Workload([leveled(level)], rate=rate / 2, connections=CONNECTIONS), warmup, seconds)
            for level in (1, 2)
        )
    )
    return {level: window.summary() for level, window in zip((1, 2), windows, strict=True)}


def priorities(argv: list[str]) -> None:
    args = priorities_parser().parse_args(argv)
    rows: dict[str, list[tuple[float, float | None]]] = {}
    for _ in range(args.rounds):
        for levels in (2, 1):
            with launch(inferpool_serve(*SERVE, "--priority-levels", str(levels)), ready_timeout=300) as server:
                saturated = blocking(drive)(server.port, Workload([leveled(1)], concurrency=16), args.warmup, 5.0)
                rate = args.overload * saturated.summary().throughput
                found = blocking(_levels)(server.port, rate, args.warmup, args.seconds)
            for level, summary in found.items():
                sent = summary.ok + summary.errors
                label = (
                    f"priority {level}" if levels == 2 else f"one level ({'first' if level == 1 else 'second'} half)"
                )
                rows.setdefault(label, []).append((summary.ok / sent if sent else 0.0, summary.p99_ms))
    print(f"{args.overload:g}x saturation, {args.rounds} rounds of {args.seconds:g} s (median)")
    print(f"{'':<28}{'success':>9}{'p99 ms':>10}")
    for label, seen in rows.items():
        success = statistics.median(rate for rate, _ in seen)
        latencies = [p99 for _, p99 in seen if p99 is not None]
        p99 = statistics.median(latencies) if latencies else float("nan")
        print(f"{label:<28}{success:>9.1%}{p99:>10.1f}")
