"""Which trial ``inferpool tune`` chooses: the winner among those that met the objective, or, when
none did, the closest, with how far it missed.

- A trial that met the objective beats every trial that did not, whatever their figures.
- Among those that met: the most throughput in a closed loop; the lowest p99 in an open loop
  (every setting that keeps up answers the offered rate: latency is what differs). The defaults
  win ties within NOISE: a setting must beat them by more than a short trial's noise to be
  worth a config file.
- When none met: the closest. How far a trial missed is its ``miss``, the p99 over the
  objective's (in an open loop, also the offered rate over the answered one, whichever is
  worse); the trial with the smallest leads. But p99s within each other's measurement noise
  (``p99_noise``) cannot be told apart, so of the trials whose p99 is within the noise of the
  leader's, the one with the most throughput is the closest. Ranking by p99 alone named a
  setting with far less throughput than the defaults for a p99 lower only by noise
  (docs/BENCHMARKS.md, "inferpool tune (issue 20)"). Trials with errors come after every trial without: a setting
  that fails requests is not close to one that serves them.

The choice is made over the whole set of trials, so it does not depend on the order they ran in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from inferpool.cli.tune.space import KEEP_UP, Load
from inferpool.harness.load import Summary

DEFAULTS = "defaults"  # the name of the trial of the settings as given, untuned

NOISE = 0.05
"""A setting replaces the defaults only if it beats them by more than this: less is within a
short trial's noise on a shared machine, and the defaults need no config file. Also the least
noise a p99 is taken to have (four parts of one run can agree by chance)."""
PARTS = 4  # a trial's answers are cut into this many consecutive parts to see its p99's noise
MIN_PART = 50  # answers per part, at least: fewer give no p99 of their own (it is the maximum)


def p99_noise(latencies: Sequence[float]) -> float | None:
    """The noise of a trial's p99, in ms: half the spread of the p99s of PARTS consecutive parts
    of its answers (``latencies`` in seconds, in the order they came), the same server in the
    same run; None with too few answers to tell."""
    if len(latencies) < PARTS * MIN_PART:
        return None
    parts = [float(np.percentile(part, 99)) * 1e3 for part in np.array_split(np.asarray(latencies), PARTS)]
    return (max(parts) - min(parts)) / 2


def miss(summary: Summary, load: Load) -> float:
    """How far from the objective: 1.0 or less when the p99 (and an open loop's rate) held,
    else the worse of p99 / objective and, in an open loop, the rate to keep up / the rate
    answered."""
    p99 = float("inf") if summary.p99_ms is None else summary.p99_ms / (load.p99_seconds * 1e3)
    if load.rate is None:
        return p99
    return max(p99, KEEP_UP * load.rate / max(summary.throughput, 1e-9))


class Ranked(Protocol):
    """What ranking needs of a trial (inferpool.cli.tune.trials.Trial)."""

    name: str
    met: bool
    summary: Summary | None
    p99_noise_ms: float | None


T = TypeVar("T", bound=Ranked)


def noise(trial: Ranked) -> float:
    """The p99's noise in ms, NOISE of the p99 at least."""
    assert trial.summary is not None
    assert trial.summary.p99_ms is not None
    return max(trial.p99_noise_ms or 0.0, NOISE * trial.summary.p99_ms)


@dataclass(frozen=True)
class Choice(Generic[T]):
    """``chosen``: the winner (``met``) or the closest; ``leader``: the closest by ``miss`` alone
    (the same unless another was within its noise with more throughput); ``ties``: the trials
    within the leader's noise, the chosen one included."""

    chosen: T
    met: bool
    leader: T
    ties: list[T]


def choose(trials: Sequence[T], load: Load) -> Choice[T] | None:
    """The winner, or the closest; None when no trial was measured."""
    measured = [t for t in trials if t.summary is not None and t.summary.p99_ms is not None]
    met = [t for t in measured if t.met]
    if met:
        best = max(met, key=lambda t: _met_preference(t, load))
        return Choice(best, True, best, [best])
    if not measured:
        return None
    clean = [t for t in measured if _summary(t).errors == 0]
    pool = clean or measured
    leader = min(pool, key=lambda t: miss(_summary(t), load))
    objective = load.p99_seconds * 1e3
    ties = [
        t for t in pool
        if miss(_summary(t), load) - miss(_summary(leader), load) <= (noise(t) + noise(leader)) / objective
    ]  # fmt: skip
    closest = max(ties, key=lambda t: _summary(t).throughput / _handicap(t))
    return Choice(closest, False, leader, ties)


def finalists(trials: Sequence[T], load: Load, count: int) -> list[T]:
    """Up to ``count`` trials other than the defaults, in the order ``choose`` would name them
    (the choice, then the choice among the rest, ...): the ones the confirmation measures
    against the defaults. The first of a ranking of single noisy trials reads high (it was
    picked for its figure), so the confirmation, not the trials, decides among these. When a
    trial met the objective, only trials that met it are finalists."""
    overall = choose(trials, load)
    strict = overall is not None and overall.met
    left = [t for t in trials if t.name != DEFAULTS and (t.met or not strict)]
    picked: list[T] = []
    while len(picked) < count and (choice := choose(left, load)) is not None:
        picked.append(choice.chosen)
        left.remove(choice.chosen)
    return picked


def _met_preference(trial: Ranked, load: Load) -> float:
    summary = _summary(trial)
    if load.concurrency is not None:
        return summary.throughput / _handicap(trial)
    assert summary.p99_ms is not None
    return -summary.p99_ms * _handicap(trial)


def _handicap(trial: Ranked) -> float:
    return 1.0 if trial.name == DEFAULTS else 1 + NOISE


def _summary(trial: Ranked) -> Summary:
    assert trial.summary is not None
    return trial.summary


def describe_miss(choice: Choice[T], load: Load) -> str:
    """How far the closest missed and why it, not the smallest miss, was named (for the verdict)."""
    trial, summary = choice.chosen, _summary(choice.chosen)
    assert summary.p99_ms is not None
    objective = load.p99_seconds * 1e3
    parts = [f"p99 {summary.p99_ms:.1f} ms ± {noise(trial):.1f} (noise)"]
    if summary.p99_ms > objective:
        parts.append(f"{summary.p99_ms / objective:.2f}x the objective (+{summary.p99_ms - objective:.1f} ms)")
    if load.rate is not None and summary.throughput < KEEP_UP * load.rate:
        parts.append(f"answered {summary.throughput:.0f} of {load.rate:g} req/s")
    else:
        parts.append(f"{summary.throughput:.0f} req/s")
    parts.append(f"{summary.errors} errors")
    text = ", ".join(parts)
    others = [t.name for t in choice.ties if t is not trial]
    if choice.leader is not trial:
        leader = _summary(choice.leader)
        ratios = f"{miss(leader, load):.2f}x against {miss(summary, load):.2f}x"
        text += (f"; {choice.leader.name} missed by less ({ratios}), within the noise, at less throughput "
                 f"({leader.throughput:.0f} req/s)")  # fmt: skip
    elif others:
        text += f"; within its noise, with less throughput: {', '.join(others)}"
    return text
