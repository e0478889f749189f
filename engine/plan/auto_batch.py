"""``max_batch_size = 0`` (the default): batch up to ``AUTO_MAX_BATCH`` or not at all, decided from
what start-up measured once it chose the backend, the precision and the dispatch.

Batching helps a model whose requests go to worker threads with calls long enough to wait for
company, and whose call of many samples costs less per sample than one (ResNet-50 in bf16 on one
thread a call: 0.80 / 0.91x the bare engine's best at 4 / 16 connections with batches of 8,
against 0.71 / 0.70x without, and no cost at one connection). It does not help, and is left off,
where:

- an input or output has no batch dimension: requests cannot share a call;
- the calls run inline on the event loop: the HTTP lane already runs the requests one wake-up
  holds as one call, without waiting (inferpool.engine.serving.inline_group); the MiniLM folder
  batched on threads did 0.61-0.75x what it does inline;
- a call is short next to ``max_queue_delay_us``, the longest a lone request waits for company
  (``MIN_CALL_DELAYS`` of them: 2 ms at the default 500 us);
- a call of ``AUTO_MAX_BATCH`` samples measured under ``MIN_GAIN`` times the samples/s of one
  (inferpool.engine.plan.batch_choice: the figures are the same start-up calls).

``RULES`` is checked in order, a pure function of the figures (the tests drive it with made-up
ones). An explicit ``max_batch_size`` always wins. The decision, its rule and figures are logged
and shown as ``batch_selection`` at ``/v2/models/{name}/config``, and kept beside the exports
(inferpool.engine.plan.batch_memory), so that a warm start serves the same batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferpool.engine.options import AUTO_MAX_BATCH
from inferpool.engine.plan.batch_choice import MIN_GAIN, BatchChoice

MIN_CALL_DELAYS = 4.0
"""A call shorter than this many ``max_queue_delay_us`` is not batched: a lone request may wait the
whole delay for company that does not come, and at four delays that wait is at most a fifth of its
trip (2 ms at the default 500 us); a call that short also gains little from company that a queue
behind busy worker threads would not give it anyway."""


@dataclass(frozen=True)
class BatchFigures:
    """What the rule is decided from, all measured or set before it."""

    batched: bool
    """Every input and output has a batch dimension."""
    dispatch: str
    """Where unbatched calls run: ``inline`` or ``threads`` (measured, or set)."""
    delay_us: float
    """``max_queue_delay_us``."""
    timed: BatchChoice | None = None
    """The start-up calls at one sample and at a full batch (None for an unbatched model)."""

    @property
    def one_ms(self) -> float:
        return self.timed.one_ms if self.timed else 0.0

    @property
    def gain(self) -> float:
        return self.timed.gain if self.timed else 0.0

    @property
    def min_call_ms(self) -> float:
        return MIN_CALL_DELAYS * self.delay_us * 1e-3

    def report(self) -> dict[str, Any]:
        rows = self.timed.rows if self.timed else None
        return {"batched": self.batched, "dispatch": self.dispatch, "one_sample_ms": round(self.one_ms, 3),
                "batch_gain": round(self.gain, 2), "full_batch_rows": rows, "min_call_ms": round(self.min_call_ms, 3),
                "min_gain": MIN_GAIN}  # fmt: skip


@dataclass(frozen=True)
class Rule:
    size: int
    applies: Callable[[BatchFigures], bool]
    reason: str  # formatted with the figures' report


RULES: dict[str, Rule] = {
    "unbatched": Rule(1, lambda f: not f.batched,
                      "an input or output has no batch dimension: requests cannot share a call"),
    "inline": Rule(1, lambda f: f.dispatch != "threads",
                   "its calls run inline, where the requests an event-loop wake-up holds already share a call"),
    "short_call": Rule(1, lambda f: f.one_ms < f.min_call_ms,
                       "a {one_sample_ms:g} ms call is short next to the wait for company (batching from "
                       "{min_call_ms:g} ms)"),
    "no_gain": Rule(1, lambda f: f.gain < MIN_GAIN,
                    "a {full_batch_rows}-sample call is {batch_gain:g}x the samples/s of one (batching from "
                    "{min_gain:g}x)"),
    "batches": Rule(AUTO_MAX_BATCH, lambda f: True,
                    "calls on worker threads of {one_sample_ms:g} ms, and a {full_batch_rows}-sample call is "
                    "{batch_gain:g}x the samples/s of one"),
}  # fmt: skip
"""Checked in order; the first that applies decides."""


@dataclass(frozen=True)
class BatchDecision:
    """The batch a model serves with (``max_batch_size``) and why."""

    size: int
    rule: str
    """A key of ``RULES``, or ``explicit``."""
    reason: str
    figures: dict[str, Any]
    cached: bool = False
    """Read from an earlier start's decision (inferpool.engine.plan.batch_memory)."""

    def report(self) -> dict[str, Any]:
        configured = self.size if self.rule == "explicit" else 0
        return {"configured": configured, "max_batch_size": self.size, "rule": self.rule, "reason": self.reason,
                "cached": self.cached, **self.figures}  # fmt: skip


def explicit(max_batch_size: int) -> BatchDecision:
    return BatchDecision(max_batch_size, "explicit", f"runtime.max_batch_size = {max_batch_size} is set", {})


def decide_batch(figures: BatchFigures) -> BatchDecision:
    """The first rule of ``RULES`` that applies, with the figures it was decided from."""
    name, rule = next((n, r) for n, r in RULES.items() if r.applies(figures))
    report = figures.report()
    text = rule.reason.format(**report)
    verdict = f"batches up to {rule.size}" if rule.size > 1 else "no batching"
    return BatchDecision(rule.size, name, f"{verdict}: {text}", report)
