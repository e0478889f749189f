"""What ``inferpool tune`` recommends, after the confirmation: of the finalists (``pick``), the
one the confirmation put furthest ahead of the defaults, and it only when that is beyond the
measured noise; otherwise the defaults are the answer, and no config file is written for a
setting that may be slower.

The bar is the largest of: NOISE (a short trial's noise on a shared machine), the defaults'
drift (the same server measured at the start and the end of the search, the same way:
inferpool.cli.tune.measure.drift) and the confirmation's own noise (half the spread of the
ratios of its pairs of rounds: inferpool.cli.tune.confirm). A setting whose trial met the
objective must also hold it in the confirmation wherever the defaults did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inferpool.cli.tune.confirm import Confirmation
from inferpool.cli.tune.rank import DEFAULTS, NOISE, Choice
from inferpool.cli.tune.trials import Trial

AGREEMENT = 0.15
"""A trial and the confirmation of the same server further apart than this (throughput) are
said to disagree: the trials' ranking is then no better than the noise between them."""


@dataclass(frozen=True)
class Decision:
    answer: str
    """The trial recommended: DEFAULTS when the defaults are the answer."""
    confirmed: bool
    """``answer`` is another setting, shown ahead of the defaults by the confirmation."""
    bar: float
    """The ratio over the defaults had to exceed 1 + bar."""
    reason: str


@dataclass(frozen=True)
class Finalist:
    """A setting the confirmation measured against the defaults, and what it found."""

    trial: Trial
    confirmation: Confirmation


def pick(
    choice: Choice[Trial] | None, finalists: Sequence[Finalist]
) -> tuple[Choice[Trial] | None, Confirmation | None]:
    """The setting to decide on and its confirmation: of the finalists, the one the confirmation
    put furthest ahead of the defaults, preferring those that held the objective there wherever
    the defaults did; when a trial met the objective, only finalists whose trials met it too."""
    if choice is None or not finalists:
        return choice, None
    eligible = [f for f in finalists if f.trial.met or not choice.met or f.trial is choice.chosen]
    if not eligible:
        return choice, None

    def preference(finalist: Finalist) -> tuple[bool, float]:
        c = finalist.confirmation
        return c.held or not c.defaults_held, c.ratio

    best = max(eligible, key=preference)
    if best.trial is choice.chosen:
        return choice, best.confirmation
    return Choice(best.trial, best.trial.met, best.trial, [best.trial]), best.confirmation


def decide(choice: Choice[Trial] | None, confirmation: Confirmation | None, drift: float | None) -> Decision:
    bar = max(NOISE, drift or 0.0, confirmation.noise if confirmation is not None else 0.0)
    if choice is None:
        return Decision(DEFAULTS, False, bar, "the defaults are the answer: no trial was measured")
    name = choice.chosen.name
    if name == DEFAULTS:
        return Decision(DEFAULTS, False, bar, "the defaults are the answer: no setting beat them in the trials")
    if confirmation is None:
        return Decision(DEFAULTS, False, bar, f"the defaults are the answer: {name} could not be confirmed "
                        "(too little of the budget was left)")  # fmt: skip
    ratio = confirmation.ratio
    if ratio <= 1 + bar:
        return Decision(DEFAULTS, False, bar, f"the defaults are the answer: {name} came out at {ratio:.2f}x the "
                        f"defaults in the confirmation, not beyond the noise (needs > {1 + bar:.2f}x)")  # fmt: skip
    if choice.met and confirmation.defaults_held and not confirmation.held:
        return Decision(DEFAULTS, False, bar, f"the defaults are the answer: {name} missed the objective in the "
                        "confirmation, where the defaults held it")  # fmt: skip
    return Decision(name, True, bar, f"{name} confirmed: {ratio:.2f}x the defaults, beyond the noise "
                    f"(needs > {1 + bar:.2f}x)")  # fmt: skip


def met_objective(decision: Decision, choice: Choice[Trial] | None, defaults: Trial,
                  confirmation: Confirmation | None) -> bool:  # fmt: skip
    """Whether the answer met the objective: the exit status is 0 only then."""
    if decision.confirmed:
        return choice is not None and choice.met
    return defaults.met or (confirmation is not None and confirmation.defaults_held)


def agreement(trial: Trial, measured: float) -> float | None:
    """A server's confirmation throughput over its trial's (None when the trial has none)."""
    if trial.summary is None or trial.summary.throughput <= 0:
        return None
    return round(measured / trial.summary.throughput, 3)
