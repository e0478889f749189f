"""A model call after an idle gap against calls back to back: what a closed loop costs the engine.

    python -m loadtest.bench idle_gap [--workload resnet50] [--gaps-ms 0,0.5,1.5,3] [--calls 40]
                                      [--rounds 3] [--threads wide|narrow]

The bare engine's rates (``loadtest.workloads.BareEngine``, the yardstick of ``loadtest.paired``)
come from calls back to back. A server never makes them so: between two calls of one connection the
answer goes out, the client sends again and the body comes in, and meanwhile the cores idle. Each
gap here is a block of ``--calls`` calls, each after a sleep of that many ms, the blocks one after
another in a round (a host that slows a vCPU which keeps halting does so over a block, not a
call); prints each block's median call in ms and its ratio to back to back in the same round.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from loadtest.bench import case_parser

Call = Callable[[], object]


def idle_gap_parser() -> argparse.ArgumentParser:
    parser = case_parser("idle_gap", __doc__)
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--gaps-ms", default="0,0.5,1.5,3", help="idle ms before each call, one block each")
    parser.add_argument("--calls", type=int, default=40, help="calls per block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", choices=("wide", "narrow"), default="wide",
                        help="the runtime as wide as the machine (one connection's) or one thread")  # fmt: skip
    return parser


def block(call: Call, gap: float, calls: int) -> float:
    """Median seconds of ``calls`` calls, each after ``gap`` idle seconds."""
    seconds = []
    for _ in range(calls):
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def rounds(call: Call, gaps: Sequence[float], calls: int, count: int) -> list[dict[float, float]]:
    """Per round, each gap's median call; the first gap's block runs first."""
    return [{gap: block(call, gap, calls) for gap in gaps} for _ in range(count)]


def idle_gap(argv: list[str] | None = None) -> list[dict[float, float]]:
    args = idle_gap_parser().parse_args(argv)
    from loadtest.workloads import WORKLOADS, BareEngine  # torch: only when the case runs

    gaps = [float(ms) / 1e3 for ms in args.gaps_ms.split(",")]
    bare = BareEngine(WORKLOADS[args.workload])
    model = bare.wide if args.threads == "wide" else bare.narrow
    try:
        found = rounds(lambda: model.call(bare.arrays), gaps, args.calls, args.rounds)
    finally:
        bare.close()
    print(f"| round | {' | '.join(f'{g * 1e3:g} ms gap' for g in gaps)} |\n|---{'|---' * len(gaps)}|")
    for index, medians in enumerate(found, 1):
        base = medians[gaps[0]]
        cells = [f"{medians[g] * 1e3:.2f} ms ({medians[g] / base:.2f}x)" for g in gaps]
        print(f"| {index} | {' | '.join(cells)} |")
    return found
