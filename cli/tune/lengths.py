"""How long ``inferpool tune`` measures a trial, when ``--trial-seconds`` does not say: as long as
the budget lets every trial the search will run be measured alike.

A trial's figure is a mean of slices, and one slice of a server here moves by ~12 % from the
next (eight 1.8 s slices of one server: 11,272-15,703 req/s, docs/BENCHMARKS.md, issue 36). Two
slices, what a 3-minute budget gave a trial at budget/60, part a trial from its own
confirmation by more than 15 % one time in five by chance alone, and left two thirds of the
budget unused when pruning kept five settings. So once the search knows how many settings it
will run, it spreads what the budget leaves over them (``spread``), and the defaults, the bar
every setting is held to and the base the search is calibrated on, are measured for
DEFAULTS_SHARE of the budget (``for_defaults``).
"""

from __future__ import annotations

from dataclasses import replace

from inferpool.cli.tune.confirm import reserve
from inferpool.cli.tune.trials import STOP_SECONDS, Trials

DEFAULTS_SHARE = 0.05
MAX_SECONDS = 30.0
"""No trial is measured longer: past this the slices' noise is well under the machine's drift."""


def for_defaults(trials: Trials) -> None:
    """The defaults' trial: DEFAULTS_SHARE of the budget, never shorter than the plan's."""
    seconds = min(MAX_SECONDS, max(trials.plan.seconds, trials.budget.seconds * DEFAULTS_SHARE))
    _use(trials, seconds)


def spread(trials: Trials, candidates: int, shortest: float) -> None:
    """Measure each of ``candidates`` trials, and the defaults again at the end, for as long as
    the budget the trials have left holds all of them at their estimated start-up, but never
    shorter than ``shortest`` (the plan's own) or longer than MAX_SECONDS."""
    budget = trials.budget
    left = budget.for_trials() + trials.again_seconds() - 1.0  # the defaults' repeat is ours to size
    each = (left - candidates * (trials.startup() + STOP_SECONDS)) / (candidates + 1)  # measuring time per trial
    per_second = trials.measuring(60.0) / 60.0  # each slice's warm-up and set-up, per measured second
    _use(trials, min(MAX_SECONDS, max(shortest, each / per_second)))


def _use(trials: Trials, seconds: float) -> None:
    trials.plan = replace(trials.plan, seconds=round(seconds, 1))
    trials.budget.reserve = reserve(trials.budget.seconds) + trials.again_seconds()
