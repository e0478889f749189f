"""The response cache's and request priorities' metrics (docs/metrics.md), on the same
preallocated slots as the per-request ones (service/telemetry/metric_slots.py): a hit or a miss,
and a request's level, cost a float add, never a lock. A model's hits and misses are counted on
tallies its front door record holds (``CacheTallies``): no look-up of their labels a request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from inferpool.service.telemetry.metric_slots import Child, Family, Slots, observe

HIT, MISS = "hit", "miss"
ANSWERED, SHED = "answered", "shed"
"""A prioritised request's outcomes: answered (a 200), or refused under load (a 503)."""


class Tally(NamedTuple):
    """One label set's count, for a caller that adds to it on every request."""

    slots: Slots
    slot: int

    def add(self) -> None:
        self.slots[self.slot] += 1.0


class CacheTallies(NamedTuple):
    """A model's response cache look-ups: answered from it, or not."""

    hit: Tally
    miss: Tally


@dataclass(eq=False)
class TrafficMetrics:
    latency: tuple[float, ...]
    """The latency histograms' bounds."""
    child: Callable[[Family, tuple[str, ...]], Child] = field(repr=False)
    """Where a label set's slots come from (``Metrics``)."""
    cache: Family = field(init=False)
    levels: Family = field(init=False)
    level_seconds: Family = field(init=False)
    _seen: dict[tuple[str, tuple[str, ...]], Child] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        cache_doc = "Requests the response cache was asked about, by model and outcome (hit: answered from it)."
        self.cache = Family("inferpool_response_cache", cache_doc, ("model", "outcome"))
        levels_doc = "Requests by priority level (1 the highest) and outcome (answered 200, or shed under load)."
        self.levels = Family("inferpool_priority_requests", levels_doc, ("priority", "outcome"))
        seconds_doc = "Model requests answered, by priority level: received to encoded, through the front door."
        name = "inferpool_priority_request_duration_seconds"
        self.level_seconds = Family(name, seconds_doc, ("priority",), self.latency)

    @property
    def families(self) -> tuple[Family, ...]:
        return self.cache, self.levels, self.level_seconds

    def _slots(self, family: Family, values: tuple[str, ...]) -> Child:
        found = self._seen.get((family.name, values))
        if found is None:
            found = self._seen[family.name, values] = self.child(family, values)
        return found

    def cache_tallies(self, model: str) -> CacheTallies:
        """Where ``model``'s hits and misses are counted: made when it is ready, as its other
        series are (a forked process's first slot in its metrics file costs a millisecond)."""
        hit, miss = (self._slots(self.cache, (model, outcome)) for outcome in (HIT, MISS))
        return CacheTallies(Tally(hit[0], hit[1][0]), Tally(miss[0], miss[1][0]))

    def prioritised(self, level: int, outcome: str, seconds: float | None = None) -> None:
        """A request of ``level`` answered (taking ``seconds`` through the door) or shed."""
        name = str(level)
        slots, index, _ = self._slots(self.levels, (name, outcome))
        slots[index[0]] += 1.0
        if seconds is not None:
            observe(self._slots(self.level_seconds, (name,)), seconds)
