"""How ``inferpool tune`` measures a server, the one way for its trials and its confirmation: the
same warm-up, the load generator in the same place, its own CPU time counted.

A trial measured one way and a confirmation another make every ranking meaningless: a trial of
the defaults came out at 2,824 req/s and the confirmation of the same settings, minutes later, at
6,066, so a setting at 0.83x the defaults was written as the winner (issue 36). So both go
through ``measure``, and the search runs the defaults again at its end (``drift``): how far two
measurements of the same server part is the noise any difference must beat.

The load generator is this process (inferpool.harness.load: one event loop). On a machine with
CPUS_TO_SPARE or more usable CPUs it is pinned to the last of them and every server to the others,
for the trials and the confirmation alike, so that it never takes a server's core; below that
(2 CPUs: a server pinned to one would be another setting) it shares them, and what it took,
``generator_cpus`` (CPU seconds per second of its window), is reported beside each figure.

Each ``measure`` opens its own connections, and which serving process the kernel hands them to
is a draw: 8 keep-alive connections to a two-process MLP server landed 8/0 or 7/1 (``ss -tnp``,
eight draws), and eight 1.8 s windows of one server ranged 2,188-3,554 req/s against 2,776 for
one 8 s window (docs/BENCHMARKS.md, issue 36). The confirmation averages eight such draws; a
trial measured in one window got one, which alone can part them by far more than 15 %. So a
trial is measured in ``slices`` of the confirmation's own length, each with its warm-up and
fresh connections, and merged: both average over the draws alike.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inferpool.harness.load import Summary, Window, Workload, run_load

WARMUP = 1.0
"""Seconds of load before each measured window, trial or confirmation slice alike: the
connections open, the server's first requests (allocator, caches) settle."""
CPUS_TO_SPARE = 3
HUNGRY = 0.5
"""A generator taking more than half a CPU on a machine it shares with the servers: its figures
are said to be bound by the generator too."""


@dataclass(frozen=True)
class Placement:
    """Where the load generator and the servers run: ``servers`` None = everywhere, shared."""

    generator: tuple[int, ...] | None
    servers: tuple[int, ...] | None

    def describe(self) -> str:
        if self.generator is None:
            return "the load generator shares the CPUs with the servers (its CPU time is reported)"
        servers = ",".join(map(str, self.servers or ()))
        return f"the load generator on CPU {self.generator[0]}, the servers on CPUs {servers}"


SHARED = Placement(None, None)


def placement(cpus: Sequence[int]) -> Placement:
    """The last CPU for the generator when at least CPUS_TO_SPARE are usable, else shared."""
    ordered = sorted(cpus)
    if len(ordered) < CPUS_TO_SPARE:
        return SHARED
    return Placement((ordered[-1],), tuple(ordered[:-1]))


def pin_generator(where: Placement) -> None:
    """Pin this process (the load generator) where ``where`` says; after the model's costs were
    timed here, which needed every CPU."""
    if where.generator is not None:
        os.sched_setaffinity(0, set(where.generator))


@dataclass(frozen=True)
class Measured:
    window: Window
    generator_cpus: float
    """CPU seconds this process spent per second of warm-up and window: the generator's share."""

    @property
    def summary(self) -> Summary:
        return self.window.summary()


def measure(
    port: int,
    workload: Workload,
    seconds: float,
    check: Callable[[Window], bool] | None = None,
    warmup: float = WARMUP,
    slice_seconds: float | None = None,
) -> Measured:
    """``seconds`` of load after ``warmup``; with ``slice_seconds``, as that many slices as fit
    (each its own warm-up and connections: the module docstring says why), merged. ``check``
    sees the merged window so far and stops the whole measure early."""
    count = slices(seconds, slice_seconds)
    each = seconds / count
    cpu, wall = time.process_time(), time.perf_counter()
    done: list[Window] = []
    stopped = [False]

    def merged_check(window: Window) -> bool:
        assert check is not None
        stopped[0] = check(combined([*done, window]))
        return stopped[0]

    for _ in range(count):
        done.append(run_load(port, workload, warmup, each, merged_check if check is not None else None))
        if stopped[0]:
            break
    spent = time.process_time() - cpu
    window = done[0] if len(done) == 1 else combined(done)
    return Measured(window, round(spent / max(time.perf_counter() - wall, 1e-9), 3))


def slices(seconds: float, slice_seconds: float | None) -> int:
    """How many slices ``seconds`` is measured in: the fewest of at most ``slice_seconds`` each."""
    if slice_seconds is None or slice_seconds <= 0:
        return 1
    return max(1, math.ceil(seconds / slice_seconds - 1e-9))


def combined(windows: Sequence[Window]) -> Window:
    """Several windows as one: their answers together over their summed time (the last one's
    may still be running)."""
    elapsed = sum(w.elapsed() for w in windows)
    end = 0.0 if all(w.end is not None for w in windows) else None
    total = Window(start=-elapsed if end is not None else time.perf_counter() - elapsed, end=end)
    for window in windows:
        total.latencies += window.latencies
        total.errors += window.errors
    return total


def drift(start: Summary, end: Summary) -> float:
    """How far two measurements of the same server part, as a share of the first's throughput."""
    return abs(end.throughput - start.throughput) / max(start.throughput, 1e-9)
