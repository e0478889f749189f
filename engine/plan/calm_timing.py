"""Timing a call two ways, narrow and wide, on a host that others share.

A neighbour on a shared host (steal, a busy sibling VM, memory bandwidth) slows the call that needs
every core far more than the one that needs one, for a second or so at a time: on the 2-vCPU
machine of docs/BENCHMARKS.md (fourteenth session), single blocks of MiniLM's call measured
0.76-1.40x faster wide where the calm figure is ~1.3x, and ResNet-50's 0.82-1.04x where the bare
engine runs it 1.9x faster on two threads; the wide lane's start-up gate then kept or refused the
lane by the moment. The lane only runs when the pod is calm (inferpool.engine.plan.pod_load), so the
calm figure is the one that decides: narrow and wide calls alternate, in up to ``BLOCKS`` blocks
``PAUSE_SECONDS`` apart, and the block where wide gained most is the answer. A block that gains
``enough`` (the gate's figure) ends the timing there: a calm start pays for one block.

Imports nothing heavy: the openvino probe (a fresh interpreter) uses it too.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

BLOCKS = 3
PAUSE_SECONDS = 0.1


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``call``, after one that warms it (a new
    artifact's first run allocates)."""
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def calmest_pair(
    narrow: Callable[[], object], wide: Callable[[], object], repeats: int, enough: float = math.inf
) -> tuple[float, float]:
    """Median seconds of ``repeats`` narrow and wide calls, alternating, in the block where wide
    gained most (the first to gain ``enough``). Each is called once first: a new artifact's first
    run allocates."""
    narrow()
    wide()
    blocks = []
    for block in range(BLOCKS):
        if block:
            time.sleep(PAUSE_SECONDS)
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):
            for call, kept in zip((narrow, wide), times, strict=True):
                started = time.perf_counter()
                call()
                kept.append(time.perf_counter() - started)
        blocks.append((statistics.median(times[0]), statistics.median(times[1])))
        if blocks[-1][0] / blocks[-1][1] >= enough:
            break
    return max(blocks, key=lambda pair: pair[0] / pair[1])
