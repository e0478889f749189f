"""`inferpool tune` keeps up exactly the servers the confirmation needs (the defaults' and the
chosen trial's), starts the chosen one again when the choice moved back to a trial whose server
it had stopped, and fits the confirmation into what is left of the budget, never past it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

import inferpool.cli.tune.budget
import inferpool.cli.tune.confirm
import inferpool.cli.tune.measure
import inferpool.cli.tune.trials
from inferpool.cli.tune.budget import EXIT_MARGIN, Budget
from inferpool.cli.tune.confirm import OVERHEAD, ROUNDS, confirm, fitting_slice, reserve, shortest, slice_seconds
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.rank import DEFAULTS
from inferpool.cli.tune.space import Knobs, Load
from inferpool.cli.tune.trials import Plan, Trial, Trials
from inferpool.config import load_settings
from inferpool.harness.load import Summary, Window, Workload
from inferpool.harness.payloads import json_request

LOAD = Load(p99_seconds=0.02, concurrency=4)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The budget's clock, advanced by hand."""
    fake = Clock()
    monkeypatch.setattr(inferpool.cli.tune.budget, "time", SimpleNamespace(monotonic=fake))
    return fake


def make_trials(tmp_path: Path, budget: Budget) -> Trials:
    settings = load_settings(None, ["--model", "inferpool.engine.zoo.mlp:build"])
    workload = Workload([json_request([0.0] * 64)], concurrency=LOAD.concurrency)
    plan = Plan(settings, [], "mlp", LOAD, workload, warmup=0.5, seconds=2.0)
    return Trials(plan, budget, Progress(budget), tmp_path)


def measured(name: str, rps: float, p99: float) -> Trial:
    summary = Summary(seconds=2.0, ok=int(rps * 2), errors=0, throughput=rps, p50_ms=p99 / 2, p99_ms=p99)
    return Trial(name, Knobs("eager", 1, 1, 1, "inline"), summary=summary, met=LOAD.met_by(summary))


def keep(trials: Trials, trial: Trial, stopped: list[str]) -> None:
    """As ``Trials.run`` ends: the trial done, its server kept or stopped."""
    stack = ExitStack()
    stack.callback(stopped.append, trial.name)
    trials.done.append(trial)
    trials._keep_or_stop(trial, stack, port=len(trials.done))


def test_only_the_defaults_and_the_finalists_keep_their_servers(tmp_path, clock):
    trials, stopped = make_trials(tmp_path, Budget(90, start=clock.now)), list[str]()
    keep(trials, measured(DEFAULTS, 1000, 30.0), stopped)
    keep(trials, measured("#1", 900, 40.0), stopped)  # none met: the closest other than the defaults
    assert set(trials.servers) == {DEFAULTS, "#1"}
    keep(trials, measured("#2", 800, 15.0), stopped)  # met: a trial that missed is no finalist now
    assert set(trials.servers) == {DEFAULTS, "#2"}
    keep(trials, measured("#3", 5000, 25.0), stopped)  # more throughput, but missed: never a finalist
    keep(trials, measured("#4", 1200, 18.0), stopped)  # met, with more throughput than #2
    keep(trials, measured("#5", 1100, 18.0), stopped)  # met, third: stopped
    assert trials.best is not None
    assert trials.best.name == "#4"
    assert [t.name for t in trials.finalists] == ["#4", "#5"]
    assert set(trials.servers) == {DEFAULTS, "#4", "#5"}
    assert stopped == ["#1", "#3", "#2"]


def test_the_chosen_trial_is_started_again_when_its_server_was_stopped(tmp_path, clock, monkeypatch):
    started: list[float] = []

    @contextmanager
    def launch(command, *, name, ready_timeout, stop_timeout, cpus=None) -> Iterator[SimpleNamespace]:
        started.append(ready_timeout)
        yield SimpleNamespace(port=9999)

    monkeypatch.setattr(inferpool.cli.tune.trials, "launch", launch)
    monkeypatch.setattr(inferpool.cli.tune.trials, "FINALISTS", 1)  # the chosen one alone
    trials, stopped = make_trials(tmp_path, Budget(90, start=clock.now)), list[str]()
    keep(trials, measured("#1", 3000, 30.0), stopped)
    keep(trials, measured("#2", 1000, 29.0), stopped)  # within #1's noise, less throughput: #1 stays
    assert trials.best is not None
    assert trials.best.name == "#1"
    # A new lowest p99 whose noise reaches #2's but not #1's: #2 is now the closest, its server gone.
    keep(trials, measured("#3", 500, 27.0), stopped)
    best = trials.best
    assert best is not None
    assert best.name == "#2"
    assert trials.port(best) is None
    assert trials.serve(best, within=0.5) is None  # too short to start anything
    assert started == []
    assert trials.serve(best, within=12.0) == 9999
    assert started == [12.0]
    assert trials.port(best) == 9999


@pytest.mark.parametrize("budget_seconds", [30, 90, 120, 600, 3600])
def test_the_reserve_holds_a_full_confirmation(budget_seconds):
    assert fitting_slice(budget_seconds, reserve(budget_seconds)) == pytest.approx(slice_seconds(budget_seconds))
    assert fitting_slice(budget_seconds, shortest()) is not None
    assert fitting_slice(budget_seconds, shortest() - 0.1) is None


@pytest.mark.parametrize(
    ("budget_seconds", "left"), list(itertools.product([60, 90, 600], [0.0, 5.0, 9.0, 13.0, 40.0]))
)
def test_the_confirmation_never_runs_past_the_budget(clock, monkeypatch, budget_seconds, left):
    """Each slice costs its warm-up, its measuring and OVERHEAD; the clock ends no later than the
    budget's deadline (which keeps EXIT_MARGIN for stopping the servers and writing the files)."""
    slices: list[float] = []

    def run_load(port, workload, warmup, duration, check=None) -> Window:
        clock.now += warmup + duration + OVERHEAD
        slices.append(duration)
        return Window(start=0.0, latencies=[0.005] * 100, end=duration)

    monkeypatch.setattr(inferpool.cli.tune.measure, "run_load", run_load)
    budget = Budget(budget_seconds, start=clock.now - (budget_seconds - EXIT_MARGIN - left))
    assert budget.left() == pytest.approx(left)
    workload = Workload([json_request([0.0])], concurrency=4)
    result = confirm(1, 2, workload, LOAD, budget, Progress(budget))
    assert clock.now <= budget.deadline + 1e-9
    if left >= shortest():
        assert result is not None
        assert len(slices) == 2 * ROUNDS
    else:
        assert result is None
        assert slices == []
