"""What ``auto`` (inferpool.engine.backends.autoselect) need not compile or time further: the
candidates that cannot win, by a cheap prior before compiling and by their fastest calls while timing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from inferpool.engine.backends.base import Runtime

KERNEL_BOUND_S = 0.02
EAGER_KERNELS_SHARE = 0.8
"""Static saves eager's per-op dispatch, some microseconds an op: on a call of 20 ms or more that
is a few percent for a graph of a few hundred ops (ResNet-50 has ~170), short of the 20 % between
eager and a backend at 0.8 of it. MiniLM's 6 ms call and the small models keep static timed."""
LONG_CALL_S = 0.01
"""A call this long is a round of its own (autoselect.ROUND_SECONDS): its fastest call is close to
its median, so one call is enough to rule it out; shorter calls are noisier and timed to the end."""


def cannot_win(backend: type[Runtime], batch1: Mapping[str, float]) -> str | None:
    """Why ``backend`` need not be compiled given the candidates' batch-1 times, or None."""
    eager = batch1.get("eager")
    if not backend.eager_kernels or eager is None or eager < KERNEL_BOUND_S:
        return None
    leader = min(batch1, key=batch1.__getitem__)
    if batch1[leader] > eager * EAGER_KERNELS_SHARE:
        return None
    return (f"not compiled: it runs eager's kernels, which are eager's {eager * 1e3:.1f} ms call, and "
            f"{leader} takes {batch1[leader] / eager:.0%} of it")  # fmt: skip


def hopeless(seen: Mapping[tuple[str, int], list[float]], batching: bool) -> set[str]:
    """The long-call candidates whose fastest calls already score worse than the leader's medians."""
    names = {name for name, _ in seen}
    median = {n: score({s: statistics.median(v) for (m, s), v in seen.items() if m == n}, batching) for n in names}
    fastest = {n: score({s: min(v) for (m, s), v in seen.items() if m == n}, batching) for n in names}
    leader = min(median, key=median.__getitem__)
    return {n for n in names if n != leader and min(seen[n, 1]) >= LONG_CALL_S and fastest[n] > median[leader]}


def score(seconds: Mapping[int, float], batching: bool) -> float:
    """autoselect's score (its module docstring), from seconds per call by batch size."""
    size = max(seconds)
    if size == 1:
        return seconds[1]
    per_sample = seconds[size] / size
    return per_sample if batching else math.sqrt(seconds[1] * per_sample)
