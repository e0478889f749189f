"""Admission control: a live estimate of model-call time, and when a new request would finish.

A request with a deadline that the work queued ahead of it would break is refused at once
(``PredictedWaitExceeded``, a 503 with Retry-After) instead of being queued only to time out:
the client learns in microseconds, not at its deadline, and the server spends no model time
on an answer nobody will read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import numpy as np

from inferpool.engine.errors import DeadlineExceeded, Overloaded, PredictedWaitExceeded
from inferpool.engine.schema import Schema
from inferpool.engine.serving.priorities import room


class ServiceTimes:
    """Exponentially weighted mean seconds per model call, per batch-size bucket.

    Why per batch size and not one mean per sample: a call costs a fixed part (Python dispatch
    between ops: most of a batch-1 call on a small CNN) plus a per-sample part. A per-sample
    mean learnt at batch 32 would predict batch 1 at a fraction of its real cost, and one mean
    per call would be wrong the other way. Buckets are powers of two (bounded table, each
    bucket sees enough calls to stay current); between buckets the curve is interpolated
    linearly, above the largest one extrapolated at its per-sample rate, below the smallest one
    held flat (the fixed cost dominates there).
    """

    def __init__(self, alpha: float = 0.1) -> None:
        # The weight of each new call: ~10 calls of memory, so a slowdown (noisy neighbour,
        # bigger inputs) shows within a few ms of traffic, and one outlier moves it by 10 %.
        self.alpha = alpha
        self._lock = threading.Lock()  # workers observing at once
        self._points: dict[int, tuple[float, float]] = {}  # bucket -> (mean batch size, mean seconds)
        self._curve: tuple[tuple[float, float], ...] = ()
        """The points in order, rebuilt once per call observed rather than sorted on every
        prediction (up to two per request admitted while others are queued); replaced whole,
        so the event loop reads it without the lock."""

    def observe(self, batch_size: int, seconds: float) -> None:
        bucket = batch_size.bit_length()
        with self._lock:
            old = self._points.get(bucket)
            if old is None:
                self._points[bucket] = (float(batch_size), seconds)
            else:
                a = self.alpha
                self._points[bucket] = (old[0] + a * (batch_size - old[0]), old[1] + a * (seconds - old[1]))
            self._curve = tuple(sorted(self._points.values()))

    def predict(self, batch_size: int) -> float:
        """Predicted seconds of one call on ``batch_size`` samples (0 before any call)."""
        points = self._curve
        if not points:
            return 0.0
        below = points[0]
        if batch_size <= below[0]:
            return below[1]
        for above in points[1:]:
            if batch_size <= above[0]:
                share = (batch_size - below[0]) / (above[0] - below[0])
                return below[1] + share * (above[1] - below[1])
            below = above
        return below[1] * batch_size / below[0]


class Admission:
    """Work accepted and not yet finished by a worker, and the admission decision.

    ``enter`` runs on the event loop, ``leave`` on whichever thread finished (or dropped) the
    request, hence the lock (uncontended, a fraction of a µs: docs/BENCHMARKS.md). A request
    counts until its worker is done with it, not until its caller stops waiting: a caller that
    timed out leaves work behind.
    """

    def __init__(self, times: ServiceTimes, runtimes: int, max_batch_size: int, capacity: int = 0) -> None:
        self.times = times
        self.runtimes = runtimes
        self.max_batch_size = max_batch_size
        self.capacity = capacity or runtimes
        """Requests admitted at once (running + queued); more are refused with Overloaded."""
        self.requests = 0
        self.samples = 0
        self.levels = 1
        """Request priority levels (inferpool.engine.serving.priorities): a lower level has less room."""
        self._lock = threading.Lock()

    def admit(self, samples: int, deadline: float | None, model: str, level: int = 0) -> None:
        """Count a request of ``samples`` at priority ``level`` in, or refuse it: Overloaded
        (its level's room reached), DeadlineExceeded (its deadline, an absolute
        ``time.monotonic()``, passed already), PredictedWaitExceeded (the work ahead would make it late)."""
        # Counted until the pipeline is done with a request, not until its caller stops
        # waiting, so that requests whose callers timed out cannot pile up beyond the bound.
        capacity = self.capacity if level <= 1 else room(self.capacity, level, self.levels)
        if self.requests >= capacity:
            shed = "" if capacity == self.capacity else f" (priority {level} is refused beyond {capacity})"
            raise Overloaded(f"{self.requests} requests are already in flight for model {model!r}{shed}")
        if deadline is not None:
            budget = deadline - time.monotonic()
            if budget <= 0:
                raise DeadlineExceeded(f"the request's deadline passed before model {model!r} got it")
            self.check(samples, budget)
        self.enter(samples)

    def enter(self, samples: int) -> None:
        with self._lock:
            self.requests += 1
            self.samples += samples

    def leave(self, samples: int) -> None:
        with self._lock:
            self.requests -= 1
            self.samples -= samples

    def predict(self, samples: int) -> tuple[float, float]:
        """(seconds until the work ahead drains, seconds until a new request of ``samples``
        finishes). Runtimes work in parallel; for GIL-bound models they don't, but then each
        measured call is slower by the same factor, so dividing by runtimes stays about right."""
        requests, queued = self.requests, self.samples
        t = self.times.predict
        size = self.max_batch_size
        if size > 1:
            # Under load batches leave full; the new request rides in the last, partial one.
            ahead = -(-queued // size) * t(min(queued, size)) if queued else 0.0
            own = t(max(samples, min(size, queued + samples)))
        else:
            ahead = requests * t(max(1, round(queued / requests))) if requests else 0.0
            own = t(samples)
        drain = ahead / self.runtimes
        return drain, drain + own

    def check(self, samples: int, budget: float) -> None:
        """Raise PredictedWaitExceeded if a request of ``samples`` would finish more than
        ``budget`` seconds from now."""
        if not self.requests:
            # Nothing ahead: never refuse. Refusing here on a stale, too-high estimate would
            # stop all traffic, and with it the calls that would correct the estimate.
            return
        drain, finish = self.predict(samples)
        if finish > budget:
            raise PredictedWaitExceeded(
                f"predicted to finish in {finish * 1e3:.1f} ms, after its deadline in {budget * 1e3:.1f} ms: "
                f"{self.requests} requests ({self.samples} samples) are ahead of it",
                retry_after=drain,
            )


def count_samples(schema: Schema, inputs: object) -> int:
    """Samples in a request (see SampleCount)."""
    return SampleCount(schema)(inputs)


class SampleCount:
    """Samples in a request, read before validation for admission only: the leading size of
    the first batched input if its nesting is one deeper than a sample, without converting
    anything (about a µs: docs/BENCHMARKS.md); anything odd counts as 1 (validation rejects
    invalid requests anyway). Built once per model: the input to read is found at load."""

    __slots__ = ("depth", "name")

    def __init__(self, schema: Schema) -> None:
        spec = next((s for s in schema.inputs if s.batched), None)
        self.name = None if spec is None else spec.name
        self.depth = 0 if spec is None else len(spec.shape)

    def __call__(self, inputs: object) -> int:
        if self.name is None:
            return 1
        # A list is the common case: tested first, it skips the Mapping ABC's slow isinstance.
        kind = type(inputs)
        if kind is list:
            value = inputs
        else:  # a dict (v2's named arrays) skips the Mapping ABC's slow isinstance too
            value = inputs.get(self.name) if kind is dict or isinstance(inputs, Mapping) else inputs  # type: ignore[attr-defined]
        if isinstance(value, np.ndarray):
            return int(value.shape[0]) if value.ndim == self.depth else 1
        depth, inner = 0, value
        while isinstance(inner, list | tuple) and inner:
            depth, inner = depth + 1, inner[0]
        return len(value) if depth == self.depth and isinstance(value, list | tuple) else 1
