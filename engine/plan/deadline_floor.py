"""The shortest deadline a model can ever meet, per sample count: its fastest calls measured at
start-up plus the path around a call.

A deadline below it is refused as invalid (400, naming the field) by the front ends
(inferpool.service.timing for one sample, before the body is read; inferpool.engine.serving.served for a
request of more, once its samples are counted), instead of being admitted and answered 504 when it
passes: no amount of retrying makes such a request succeed, so it is the caller's mistake, not a
transient server state. Whole milliseconds, rounded up: the header is an integer of ms, and any
integer below the rounded-up figure is below every call the model made.

Why more samples raise it: a deadline of 1 ms met one digit (0.2 ms) but not eight (0.9 ms of
model call, answered 504 in 10 of 30 tries); the floor is the one-sample call plus the per-sample
slope of the full-batch call timed beside it, so eight digits need 2 ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferpool.engine.client import MIN_FLOOR_MS

if TYPE_CHECKING:  # the lane's module imports the backends, which import the options, which import the pipeline
    from inferpool.engine.plan.wide import WideChoice

__all__ = ["MIN_FLOOR_MS", "PATH_SECONDS", "DeadlineFloor"]

PATH_SECONDS = 0.0002
"""The path around one call (admission, hand-off, validation, the answer's arrays): 0.1-0.2 ms
of a request measured in process on digits (loadtest/bench/app_cpu.py), which a deadline leaves
the model call less of."""


@dataclass(frozen=True)
class DeadlineFloor:
    """A model's fastest one-sample call and the least each further sample added at start-up."""

    one_seconds: float
    per_sample_seconds: float = 0.0

    @classmethod
    def measured(
        cls, one_sample: Iterable[float], full: tuple[int, float] | None = None, wide: WideChoice | None = None
    ) -> DeadlineFloor:
        """From the one-sample calls timed at start-up, the fastest full-batch call (``rows``,
        seconds) when one was timed, and the wide lane's one-sample time when a call alone may
        take it (it can be the fastest)."""
        fastest = min(one_sample)
        if wide is not None and wide.enabled and wide.min_rows == 1 and wide.wide_ms is not None:
            fastest = min(fastest, wide.wide_ms / 1e3)
        slope = 0.0
        if full is not None and full[0] > 1:
            slope = max(0.0, (full[1] - fastest) / (full[0] - 1))
        return cls(fastest, slope)

    def faster(self, one_sample: Iterable[float]) -> DeadlineFloor:
        """This floor with a faster one-sample call, if any of ``one_sample`` was (a forked
        process on more threads than the parent timed on)."""
        return DeadlineFloor(min(self.one_seconds, *one_sample), self.per_sample_seconds)

    def seconds(self, samples: int = 1) -> float:
        return self.one_seconds + max(0, samples - 1) * self.per_sample_seconds + PATH_SECONDS

    def ms(self, samples: int = 1) -> int:
        # round() first: 7.0000000001 ms of float noise is 7, not 8.
        return max(MIN_FLOOR_MS, math.ceil(round(self.seconds(samples) * 1e3, 6)))
