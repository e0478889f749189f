"""The search space of ``inferpool tune``, pruned by the measured costs (inferpool.cli.tune.costs) instead
of walked as a grid, and ordered by a simple throughput model so that the budget goes to the
settings likeliest to win first.

Pruning rules (each one says why a setting cannot help on this model, machine and workload):

- backends: kept if within KEEP_RATIO of the fastest per-sample cost at some batch size;
- intra-op threads above 1: kept only where they cut a call's time by THREADS_GAIN or more;
- batch sizes: for each process count, the knee (the smallest size within BATCH_GAIN of the
  lowest per-sample cost) and half of it, of the sizes no larger than the requests a process has
  outstanding and whose call fits a quarter of the p99 objective; at least one past 1 wherever
  a batch can fill (``useful_batches`` says why); the queue delay is one such call, or a
  quarter of it;
- processes x runtimes: no more parallel slots than requests outstanding; processes x
  runtimes x threads within the CPU budget (inferpool.engine.plan.threads);
- several runtimes per process and worker threads only for calls that release the GIL (or are
  too long to run on the event loop); inline only with one runtime and no batching.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from inferpool.cli.tune.costs import Costs
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.dispatch_choice import HELD_SHARE, LONG_CALL_US
from inferpool.harness.load import Summary

KEEP_RATIO = 1.3
THREADS_GAIN = 1.3
BATCH_GAIN = 0.9  # the knee: the smallest batch size whose per-sample cost is at most the lowest / 0.9
HTTP_SECONDS = 300e-6
"""A request's HTTP work on its process's event loop (parse, route, JSON, encode), before the
defaults trial measures it (``calibrate``)."""
CLIENT_SHARE = 1.0
"""The load generator's CPU per request, as a share of the server's HTTP work: it runs on the
same CPUs. 1.0 fit the MLP on 2 CPUs, where one process served as fast as two (the CPUs, not the
event loops, were the limit)."""
DELAY_PENALTY = 0.97  # ranks the shorter queue delay after the longer one; a trial settles it
HANDOFF_SECONDS = 30e-6  # one hand-off to a worker thread and back
LIGHTER_DELAY = 4  # the second queue delay tried: a quarter of a call
MIN_DELAY_US = 50  # shorter waits are lost in the batcher's own wake-up time
KEEP_UP = 0.95  # an open loop's objective: answers at this share of the offered rate, at least


@dataclass(frozen=True)
class Knobs:
    """One point of the space: the settings a trial's server is started with."""

    backend: str
    workers: int
    num_runtimes: int
    intra_op_threads: int
    dispatch: str  # inline | threads | auto (with batching, which runs its own threads)
    max_batch_size: int = 1
    max_queue_delay_us: float = 500.0
    precision: str = "auto"
    accuracy_min_cosine: float = 0.99
    """With int8: the gate's bar. Trials of int8 start strict (refused when the gate fails), so
    a setting that fails it never serves, never measures and is never recommended."""

    @classmethod
    def of(cls, options: RuntimeOptions, workers: int) -> Knobs:
        """The knobs as configured (``auto`` and 0 where the server is to choose)."""
        o = options
        return cls(o.backend, workers, o.num_runtimes, o.intra_op_threads, o.dispatch, o.max_batch_size,
                   o.max_queue_delay_us, "fp32" if o.precision == "fp32" else "auto")  # fmt: skip

    def resolved(self, served: Mapping[str, Any]) -> Knobs:
        """As the server says it resolved them (GET /v2/models/{name}/config): ``auto``'s backend
        and dispatch, the runtimes and the batch for 0; batching, which is its own dispatch, as ``auto``."""
        dispatch = served.get("dispatch", self.dispatch)
        return replace(self, backend=served.get("backend", self.backend), dispatch="auto" if dispatch == "batch"
                       else dispatch, num_runtimes=served.get("runtimes", self.num_runtimes),
                       max_batch_size=served.get("max_batch_size", self.max_batch_size))  # fmt: skip

    def flags(self) -> list[str]:
        """``inferpool serve`` flags that set these knobs (flags win over the environment)."""
        return [
            "--workers", str(self.workers),
            "--runtime.backend", self.backend,
            "--runtime.num-runtimes", str(self.num_runtimes),
            "--runtime.intra-op-threads", str(self.intra_op_threads),
            "--runtime.dispatch", self.dispatch,
            "--runtime.max-batch-size", str(self.max_batch_size),
            "--runtime.max-queue-delay-us", f"{self.max_queue_delay_us:g}",
            *self._precision_flags(),
        ]  # fmt: skip

    def _precision_flags(self) -> list[str]:
        if self.precision in UNGATED:
            return ["--runtime.precision", self.precision]
        return ["--runtime.precision", self.precision, "--runtime.precision-strict",
                "--runtime.accuracy-min-cosine", f"{self.accuracy_min_cosine:g}"]  # fmt: skip

    def runtime(self) -> dict[str, object]:
        """The knobs under ``[runtime]`` in a config file."""
        return {
            "backend": self.backend,
            "num_runtimes": self.num_runtimes,
            "intra_op_threads": self.intra_op_threads,
            "dispatch": self.dispatch,
            "max_batch_size": self.max_batch_size,
            "max_queue_delay_us": self.max_queue_delay_us,
            **self._precision_table(),
        }

    def _precision_table(self) -> dict[str, object]:
        if self.precision in UNGATED:
            return {"precision": self.precision}
        return {"precision": self.precision, "precision_strict": True, "accuracy_min_cosine": self.accuracy_min_cosine}


UNGATED = ("auto", "fp32")
"""Precisions a trial passes as they are: ``auto`` decides bf16 by its own gate, fp32 has none; int8
trials are strict at the tune's own bar (``accuracy_min_cosine``)."""


@dataclass(frozen=True)
class Load:
    """The workload's shape: closed loop at ``concurrency``, or open loop at ``rate``."""

    p99_seconds: float
    concurrency: int | None = None
    rate: float | None = None

    @property
    def outstanding(self) -> int:
        """Requests in the server at once: the clients, or the rate times the objective's
        latency (Little's law) for an open loop."""
        if self.concurrency is not None:
            return self.concurrency
        assert self.rate is not None
        return max(1, math.ceil(self.rate * self.p99_seconds))

    def describe(self) -> str:
        return f"closed loop, {self.concurrency} clients" if self.concurrency else f"open loop, {self.rate:g} req/s"

    def met_by(self, summary: Summary) -> bool:
        """The objective: p99 within it, no error, and in an open loop, the rate kept up with."""
        fast = summary.p99_ms is not None and summary.p99_ms <= self.p99_seconds * 1e3
        keeps_up = self.rate is None or summary.throughput >= KEEP_UP * self.rate
        return fast and keeps_up and summary.errors == 0


@dataclass(frozen=True)
class Candidate:
    knobs: Knobs
    predicted: float  # requests per second
    refines: Knobs | None = None
    """The setting this one only refines (the same with the longer queue delay): worth a trial
    only if that one leads (see inferpool.cli.tune)."""


@dataclass(frozen=True)
class Space:
    candidates: list[Candidate]  # best predicted first
    grid: int  # how many points a blind grid over the same values would have had
    reasons: list[str]  # what was pruned and why


def keep_backends(costs: Costs, sizes: list[int] | None = None) -> list[str]:
    """Backends within KEEP_RATIO of the best per-sample cost at some batch size (1 thread)."""
    backends = costs.backends()
    sizes = sizes or sorted({s for b in backends for s in costs.sizes(b)})
    best = {s: min(costs.per_sample(b, 1, s) for b in backends) for s in sizes}
    return [b for b in backends if any(costs.per_sample(b, 1, s) <= KEEP_RATIO * best[s] for s in sizes)]


def useful_threads(costs: Costs, backend: str) -> list[int]:
    """1, and the intra-op thread counts that cut a call's time by THREADS_GAIN somewhere."""
    faster = [
        t for t in costs.threads(backend)
        if t > 1 and any(costs.call(backend, 1, s) >= THREADS_GAIN * costs.call(backend, t, s)
                         for s in costs.sizes(backend, t))
    ]  # fmt: skip
    return [1, *faster]


def useful_batches(costs: Costs, backend: str, threads: int, load: Load, limit: int) -> list[int]:
    """1, and the batch sizes past 1 worth a trial for a process with ``limit`` requests
    outstanding: the knee and half of it, of the sizes that can fill (at most ``limit``) and
    whose call fits a quarter of the p99 objective.

    The knee is the smallest size whose per-sample cost is within BATCH_GAIN of the lowest
    (larger ones save less than 10 % more per sample, and wait longer to fill). There is always
    one past 1 when a batch of 2 can fill and fits: a bare call's cost leaves out what batching
    saves in a server (one pass through the engine and one wake-up of the batcher per batch,
    not per request), so no measured cost justifies dropping batching altogether. Walking up
    the sizes until the first that saved too little let one noisy cell drop every batch size
    (the digits model at 64 clients, docs/BENCHMARKS.md)."""
    if not costs.batched:
        return [1]
    sizes = [
        s for s in costs.sizes(backend, threads) or costs.sizes(backend)
        if 2 <= s <= limit and costs.call(backend, threads, s) <= load.p99_seconds / 4
    ]  # fmt: skip
    if not sizes:
        return [1]
    lowest = min(costs.per_sample(backend, threads, s) for s in sizes)
    knee = min(s for s in sizes if BATCH_GAIN * costs.per_sample(backend, threads, s) <= lowest)
    return [1, *sorted({s for s in (knee // 2, knee) if s >= 2})]


def process_counts(cpus: int) -> list[int]:
    counts = list(range(1, cpus + 1)) if cpus <= 8 else [2**i for i in range(int(math.log2(cpus)) + 1)]
    return sorted({*counts, cpus})


def build_space(costs: Costs, load: Load, models: int, oversubscribe: bool, skip: Knobs | None) -> Space:
    """Every surviving point, best predicted first; ``skip`` (the defaults as served) is left
    out: its trial has run already."""
    reasons = [*costs.notes, *(f"{b}: dropped, {why}" for b, why in costs.skipped.items())]
    backends = keep_backends(costs)
    reasons += [f"{b}: dropped, >{KEEP_RATIO}x slower per sample at every batch size" for b in costs.backends()
                if b not in backends]  # fmt: skip
    found: list[Candidate] = []
    for backend in backends:
        share = costs.gil_share.get(backend, 1.0)
        slow = costs.call(backend, 1, 1) * 1e6 >= LONG_CALL_US
        parallel = share < HELD_SHARE or slow  # calls on several threads overlap
        if not parallel and costs.cpus >= 2:
            reasons.append(f"{backend}: one runtime per process, inline: its calls hold the GIL ({share:.0%})")
        for threads in useful_threads(costs, backend):
            for workers in process_counts(costs.cpus):
                batches = useful_batches(costs, backend, threads, load, max(1, load.outstanding // workers))
                slots = (costs.cpus // (workers * models)) // threads
                if slots < 1 and not oversubscribe:
                    continue
                for runtimes in sorted({1, max(1, slots)}):
                    if workers * runtimes > max(1, load.outstanding) or (runtimes > 1 and not parallel):
                        continue
                    found += _points(costs, load, Knobs(backend, workers, runtimes, threads, "inline"), batches,
                                     parallel, slow)  # fmt: skip
    ranked = sorted((c for c in found if c.knobs != skip), key=lambda c: -c.predicted)
    return Space(ranked, grid_size(costs, len(costs.backends()) + len(costs.skipped)), reasons)


def grid_size(costs: Costs, backends: int) -> int:
    """Points of a blind grid over the same values: every backend, process count, runtimes and
    threads that fit the CPUs, two dispatches, and two queue delays per batch size past 1."""
    sizes = max((len(costs.sizes(b)) for b in costs.backends()), default=1)
    cpus = costs.cpus
    fits = sum(cpus // p // t for p in process_counts(cpus) for t in range(1, cpus + 1))
    return backends * fits * (2 + 2 * (sizes - 1))


def _points(costs: Costs, load: Load, base: Knobs, batches: list[int], parallel: bool, slow: bool) -> list[Candidate]:
    points: list[tuple[Knobs, Knobs | None]] = []
    if base.num_runtimes == 1 and not slow:
        points.append((base, None))
    if parallel:
        points.append((replace(base, dispatch="threads"), None))
    for batch in batches[1:]:
        call_us = round(costs.call(base.backend, base.intra_op_threads, batch) * 1e6)
        full = replace(
            base, dispatch="auto", max_batch_size=batch, max_queue_delay_us=float(max(MIN_DELAY_US, call_us))
        )
        points.append((full, None))
        if call_us // LIGHTER_DELAY >= MIN_DELAY_US:
            points.append((replace(full, max_queue_delay_us=float(call_us // LIGHTER_DELAY)), full))
    return [Candidate(k, predict(k, costs, load), refines) for k, refines in points]


def predict(knobs: Knobs, costs: Costs, load: Load, http: float = HTTP_SECONDS) -> float:
    """Requests per second: the least of what the CPUs (shared with the load generator), each
    process's event loop (which holds the GIL for the HTTP work and for the held share of calls
    run inline or handed off), its runtimes and, in a closed loop, the clients' round trips allow."""
    batch = max(1, min(knobs.max_batch_size, load.outstanding // knobs.workers))
    call = costs.call(knobs.backend, knobs.intra_op_threads, batch)
    per_sample = call / batch
    held = per_sample if knobs.dispatch == "inline" else costs.gil_share.get(knobs.backend, 1.0) * per_sample
    loop = http + held + (0.0 if knobs.dispatch == "inline" else HANDOFF_SECONDS / batch)
    cpu = costs.cpus / ((1 + CLIENT_SHARE) * http + knobs.intra_op_threads * per_sample)
    processes = knobs.workers * min(1 / loop, knobs.num_runtimes * batch / call)
    rate = min(cpu, processes)
    if load.concurrency is not None:
        rate = min(rate, load.concurrency / (http + call))
    # A batch that waits less than a call for company runs emptier when the clients are few.
    return rate * (DELAY_PENALTY if knobs.max_batch_size > 1 and knobs.max_queue_delay_us * 1e-6 < call else 1.0)


def calibrate(knobs: Knobs, costs: Costs, load: Load, measured: float) -> float:
    """The HTTP cost per request for which ``predict`` gives the defaults' measured rate."""
    low, high = 1e-6, 0.1
    for _ in range(40):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if predict(knobs, costs, load, middle) > measured else (low, middle)
    return high


def rerank(space: Space, costs: Costs, load: Load, http: float) -> Space:
    ranked = sorted(
        (replace(c, predicted=predict(c.knobs, costs, load, http)) for c in space.candidates),
        key=lambda c: -c.predicted,
    )
    return replace(space, candidates=ranked)
