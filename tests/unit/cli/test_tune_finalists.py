"""`inferpool tune` names its winner from the confirmation, not from the trials: the best of a
ranking of single noisy trials reads high for having been picked (a trial of 5,798 req/s came
out at 0.69x the defaults in the confirmation: docs/BENCHMARKS.md, issue 36), so the two best
settings are confirmed against the defaults in the same interleaved rounds, and the one those
rounds put furthest ahead is the one decided on."""

from __future__ import annotations

import time

import pytest

import inferpool.cli.tune.measure
from inferpool.cli.tune.budget import EXIT_MARGIN, Budget
from inferpool.cli.tune.confirm import confirm_all, fitting_slice, shortest
from inferpool.cli.tune.decide import Finalist, decide, pick
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.rank import DEFAULTS, choose, finalists
from inferpool.harness.load import Window, Workload
from inferpool.harness.payloads import json_request
from tests.unit.cli.test_tune_confirmed import LOAD, checked, trial


class OrderedMachine:
    """Servers of fixed speeds, each slice at half speed when the slice before it loaded
    another server (a neighbour still settling): what interleaving must cancel."""

    def __init__(self, speeds: dict[int, float]) -> None:
        self.speeds = speeds
        self.last: int | None = None
        self.order: list[int] = []

    def run_load(self, port, workload, warmup, duration, check=None) -> Window:
        speed = self.speeds[port] / (2 if self.last not in (None, port) else 1)
        self.last = port
        self.order.append(port)
        return Window(start=0.0, latencies=[0.002] * int(speed * duration), end=duration)


def test_each_finalist_is_measured_against_the_same_defaults_slices(monkeypatch):
    machine = OrderedMachine({1: 1000.0, 2: 1000.0, 3: 1200.0})
    monkeypatch.setattr(inferpool.cli.tune.measure, "run_load", machine.run_load)
    budget = Budget(600, start=time.monotonic())
    workload = Workload([json_request([0.0] * 64)], concurrency=LOAD.concurrency)
    found = confirm_all(1, [2, 3], workload, LOAD, budget, Progress(budget))
    assert len(found) == 2
    same, faster = found
    # Each pair of rounds is one setting's own, defaults-tuned then tuned-defaults: the
    # neighbour's halving hits both sides of it alike, though the pairs of the two alternate.
    assert same.pair_ratios == pytest.approx([1.0] * 2, rel=0.02)
    assert faster.pair_ratios == pytest.approx([1.2] * 2, rel=0.02)
    assert same.ratio == pytest.approx(1.0, rel=0.02)
    assert faster.ratio == pytest.approx(1.2, rel=0.02)
    assert machine.order == [1, 2, 2, 1, 1, 3, 3, 1] * 2


def test_only_as_many_finalists_as_the_budget_left_holds(monkeypatch):
    monkeypatch.setattr(inferpool.cli.tune.measure, "run_load", OrderedMachine({1: 1.0, 2: 1.0, 3: 1.0}).run_load)
    workload = Workload([json_request([0.0] * 64)], concurrency=LOAD.concurrency)
    budget = Budget(600, start=time.monotonic() - 600 + EXIT_MARGIN + shortest(settings=2) - 0.5)
    assert fitting_slice(600, budget.left(), settings=2) is None  # two settings' shortest rounds do not fit
    assert fitting_slice(600, budget.left(), settings=1) is not None
    found = confirm_all(1, [2, 3], workload, LOAD, budget, Progress(budget))
    assert len(found) == 1
    budget = Budget(600, start=time.monotonic() - 600 + EXIT_MARGIN + shortest(settings=1) - 0.5)
    assert confirm_all(1, [2, 3], workload, LOAD, budget, Progress(budget)) == []


def test_the_finalists_are_the_two_best_other_than_the_defaults():
    trials = [trial(DEFAULTS, 1000), trial("#1", 1500), trial("#2", 1400), trial("#3", 1300)]
    assert [t.name for t in finalists(trials, LOAD, 2)] == ["#1", "#2"]
    missed = trial("#4", 5000)
    missed.met = False
    # A trial that met the objective exists: one that missed it is no finalist, whatever its throughput.
    assert [t.name for t in finalists([*trials, missed], LOAD, 2)] == ["#1", "#2"]


def test_the_runner_up_wins_when_the_confirmation_puts_it_ahead():
    trials = [trial(DEFAULTS, 1000), trial("#1", 1500), trial("#2", 1400)]
    choice = choose(trials, LOAD)
    assert choice is not None
    assert choice.chosen.name == "#1"  # its lucky trial
    lucky, steady = checked(0.98), checked(1.20)
    picked, confirmation = pick(choice, [Finalist(trials[1], lucky), Finalist(trials[2], steady)])
    assert picked is not None
    assert picked.chosen.name == "#2"
    assert confirmation is steady
    decision = decide(picked, confirmation, drift=0.02)
    assert (decision.answer, decision.confirmed) == ("#2", True)


def test_a_finalist_that_missed_the_objective_is_not_picked_over_one_that_held_it():
    trials = [trial(DEFAULTS, 1000), trial("#1", 1500), trial("#2", 1400)]
    choice = choose(trials, LOAD)
    assert choice is not None
    held, missed = checked(1.10), checked(1.40, held=False)
    picked, confirmation = pick(choice, [Finalist(trials[1], held), Finalist(trials[2], missed)])
    assert picked is not None
    assert picked.chosen.name == "#1"
    assert confirmation is held


def test_no_finalist_beyond_the_noise_leaves_the_defaults_the_answer():
    trials = [trial(DEFAULTS, 1000), trial("#1", 1500), trial("#2", 1400)]
    choice = choose(trials, LOAD)
    picked, confirmation = pick(choice, [Finalist(trials[1], checked(0.97)), Finalist(trials[2], checked(1.02))])
    decision = decide(picked, confirmation, drift=0.02)
    assert (decision.answer, decision.confirmed) == (DEFAULTS, False)
