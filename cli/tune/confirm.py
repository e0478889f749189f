"""``inferpool tune``'s last step: the winner against the defaults, both servers up, in interleaved
rounds (defaults-tuned, tuned-defaults, ...) so that a noisy neighbour slows both alike; the
ratio of their throughputs and whether the objective held for each, on the same clock. Each
slice is measured as a trial is (inferpool.cli.tune.measure: same warm-up, same generator
placement), and each round's own ratio is kept. A slice right after the other server's runs
slower than one after its own (measured: rounds of 0.95, 1.90, 1.04, 1.95 for the MLP, where
the order alternates), so the noise is taken from pairs of rounds, defaults-tuned then
tuned-defaults, in which that order effect cancels, as it does in the ratio of the whole."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferpool.cli.tune.budget import Budget
from inferpool.cli.tune.measure import WARMUP, combined, measure
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.space import Load
from inferpool.harness.load import Summary, Window, Workload

ROUNDS = 4
OVERHEAD = 0.25
"""Per slice, beyond its warm-up and measuring: a fresh event loop, the connections opened
before the clock starts and the clients cancelled after it stops (inferpool.harness.load.drive)."""
MIN_SLICE = 0.5
MAX_SLICE = 5.0


def reserve(budget_seconds: float) -> float:
    """Seconds to keep for the confirmation: ROUNDS x 2 slices of ~1 % of the budget each."""
    return 2 * ROUNDS * (slice_seconds(budget_seconds) + WARMUP + OVERHEAD) + 1.0


def shortest() -> float:
    """Seconds the shortest confirmation worth running takes."""
    return 2 * ROUNDS * (MIN_SLICE + WARMUP + OVERHEAD)


def slice_seconds(budget_seconds: float) -> float:
    return min(MAX_SLICE, max(1.0, budget_seconds / 100))


def fitting_slice(budget_seconds: float, left: float) -> float | None:
    """The measured seconds per slice: ~1 % of the budget, but no more than ``left`` seconds
    hold for all 2 x ROUNDS of them; None when not even MIN_SLICE fits."""
    slice_ = min(slice_seconds(budget_seconds), left / (2 * ROUNDS) - WARMUP - OVERHEAD)
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
    """None when too little of the budget is left for even short slices."""
    slice_ = fitting_slice(budget.seconds, budget.left())
    if slice_ is None:
        return None
    ports = (defaults_port, tuned_port)  # the same port when the defaults won
    windows: tuple[list[Window], list[Window]] = ([], [])
    shares: list[float] = []
    for round_ in range(ROUNDS):
        for side in (0, 1) if round_ % 2 == 0 else (1, 0):
            progress.update(f"confirmation round {round_ + 1}/{ROUNDS}", budget.left())
            measured = measure(ports[side], workload, slice_)
            windows[side].append(measured.window)
            shares.append(measured.generator_cpus)
    defaults, tuned = merged(windows[0]), merged(windows[1])
    rounds = [round(_ratio(d.summary(), t.summary(), load), 3) for d, t in zip(*windows, strict=True)]
    pairs = [
        round(_ratio(merged(windows[0][k : k + 2]), merged(windows[1][k : k + 2]), load), 3)
        for k in range(0, ROUNDS - 1, 2)
    ]
    return Confirmation(
        ROUNDS, round(slice_, 2), defaults, tuned, _ratio(defaults, tuned, load), load.met_by(tuned),
        load.met_by(defaults), rounds, pairs, round(sum(shares) / len(shares), 3),
    )  # fmt: skip


def merged(windows: list[Window]) -> Summary:
    """One summary of several windows: their answers together over their summed time."""
    return combined(windows).summary()


def _ratio(defaults: Summary, tuned: Summary, load: Load) -> float:
    if load.concurrency is not None:
        return tuned.throughput / max(defaults.throughput, 1e-9)
    return (defaults.p99_ms or 0.0) / max(tuned.p99_ms or 0.0, 1e-9)
