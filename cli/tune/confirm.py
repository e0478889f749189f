"""``inferpool tune``'s last step: the trials' two best settings against the defaults, all their
servers up, in interleaved rounds (defaults-tuned, tuned-defaults, ...) so that a noisy
neighbour slows both alike; for each, the ratio of its throughput to the defaults' and whether the
objective held, on the same clock. The winner is named from these rounds, not from the trials
(inferpool.cli.tune.rank.finalists says why). Each
slice is measured as a trial is (inferpool.cli.tune.measure: same warm-up, same generator
placement), and each round's own ratio is kept. A slice right after the other server's runs
slower than one after its own (measured: rounds of 0.95, 1.90, 1.04, 1.95 for the MLP, where
the order alternates), so the noise is taken from pairs of rounds, defaults-tuned then
tuned-defaults, in which that order effect cancels, as it does in the ratio of the whole."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inferpool.cli.tune.budget import Budget
from inferpool.cli.tune.measure import WARMUP, combined, measure
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.space import Load
from inferpool.harness.load import Summary, Window, Workload

ROUNDS = 4
"""Rounds per setting confirmed: two pairs, defaults-tuned then tuned-defaults."""
FINALISTS = 2
"""Settings confirmed: the two best of the trials. The best of a ranking of single noisy trials
reads high for having been picked, so the runner-up is confirmed too, and the winner is named
from the confirmation's rounds (inferpool.cli.tune.rank.finalists)."""
OVERHEAD = 0.25
"""Per slice, beyond its warm-up and measuring: a fresh event loop, the connections opened
before the clock starts and the clients cancelled after it stops (inferpool.harness.load.drive)."""
MIN_SLICE = 0.5
MAX_SLICE = 5.0


def reserve(budget_seconds: float, settings: int = FINALISTS) -> float:
    """Seconds to keep for the confirmation: ROUNDS x 2 slices of ~1 % of the budget for each
    of ``settings``."""
    return settings * 2 * ROUNDS * (slice_seconds(budget_seconds) + WARMUP + OVERHEAD) + 1.0


def shortest(settings: int = 1) -> float:
    """Seconds the shortest confirmation worth running takes (of one setting, by default)."""
    return settings * 2 * ROUNDS * (MIN_SLICE + WARMUP + OVERHEAD)


def slice_seconds(budget_seconds: float) -> float:
    return min(MAX_SLICE, max(1.0, budget_seconds / 100))


def fitting_slice(budget_seconds: float, left: float, settings: int = 1) -> float | None:
    """The measured seconds per slice: ~1 % of the budget, but no more than ``left`` seconds
    hold for all ``settings`` x 2 x ROUNDS of them; None when not even MIN_SLICE fits."""
    slice_ = min(slice_seconds(budget_seconds), left / (settings * 2 * ROUNDS) - WARMUP - OVERHEAD)
    return None if slice_ < MIN_SLICE else slice_


@dataclass(frozen=True)
class Confirmation:
    rounds: int
    slice_seconds: float
    defaults: Summary
    tuned: Summary
    ratio: float
    """Tuned over defaults: throughput (closed loop), or defaults' p99 over tuned's (open loop)."""
    held: bool
    defaults_held: bool
    round_ratios: list[float] = field(default_factory=list)
    """Each round's own ratio (both its slices, back to back)."""
    pair_ratios: list[float] = field(default_factory=list)
    """Each pair of rounds' ratio (one of each order)."""
    generator_cpus: float = 0.0
    """The load generator's CPU share, the mean over the slices (inferpool.cli.tune.measure)."""

    @property
    def noise(self) -> float:
        """Half the spread of the pairs' ratios: how far the ratio itself moves here."""
        return (max(self.pair_ratios) - min(self.pair_ratios)) / 2 if self.pair_ratios else 0.0


def confirm(
    defaults_port: int, tuned_port: int, workload: Workload, load: Load, budget: Budget, progress: Progress
) -> Confirmation | None:
    """One setting against the defaults; None when too little of the budget is left for even
    short slices."""
    found = confirm_all(defaults_port, [tuned_port], workload, load, budget, progress)
    return found[0] if found else None


def confirm_all(
    defaults_port: int, ports: Sequence[int], workload: Workload, load: Load, budget: Budget, progress: Progress
) -> list[Confirmation]:
    """Each of ``ports`` against the defaults, as many of them, best first, as the budget left
    holds (none when not even one does). Their pairs of rounds alternate (defaults-a, a-defaults,
    defaults-b, b-defaults, defaults-a, ...), so that a neighbour's noise falls on all alike,
    and each pair is one setting's own, in which the order effect cancels."""
    count = len(ports)
    while count and fitting_slice(budget.seconds, budget.left(), count) is None:
        count -= 1
    slice_ = fitting_slice(budget.seconds, budget.left(), count) if count else None
    if slice_ is None:
        return []
    windows: list[tuple[list[Window], list[Window]]] = [([], []) for _ in range(count)]  # (the defaults', its own)
    shares: list[float] = []
    for pair in range(ROUNDS // 2):
        for setting, port in enumerate(ports[:count]):
            for round_, sides in enumerate(((0, 1), (1, 0))):
                progress.update(f"confirmation round {2 * pair + round_ + 1}/{ROUNDS}", budget.left())
                for side in sides:
                    measured = measure((defaults_port, port)[side], workload, slice_)
                    windows[setting][side].append(measured.window)
                    shares.append(measured.generator_cpus)
    share = round(sum(shares) / len(shares), 3)
    return [_against(theirs, mine, slice_, load, share) for theirs, mine in windows]


def _against(theirs: list[Window], mine: list[Window], slice_: float, load: Load, share: float) -> Confirmation:
    defaults, tuned = merged(theirs), merged(mine)
    rounds = [round(_ratio(d.summary(), t.summary(), load), 3) for d, t in zip(theirs, mine, strict=True)]
    pairs = [
        round(_ratio(merged(theirs[k : k + 2]), merged(mine[k : k + 2]), load), 3) for k in range(0, ROUNDS - 1, 2)
    ]
    return Confirmation(
        ROUNDS, round(slice_, 2), defaults, tuned, _ratio(defaults, tuned, load), load.met_by(tuned),
        load.met_by(defaults), rounds, pairs, share,
    )  # fmt: skip


def merged(windows: list[Window]) -> Summary:
    """One summary of several windows: their answers together over their summed time."""
    return combined(windows).summary()


def _ratio(defaults: Summary, tuned: Summary, load: Load) -> float:
    if load.concurrency is not None:
        return tuned.throughput / max(defaults.throughput, 1e-9)
    return (defaults.p99_ms or 0.0) / max(tuned.p99_ms or 0.0, 1e-9)
