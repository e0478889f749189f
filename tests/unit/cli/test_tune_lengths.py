"""Without ``--trial-seconds``, `inferpool tune` measures each trial as long as the budget lets all
of them be measured alike: two slices a trial parted a trial from its confirmation by more than
15 % one time in five by chance, and left two thirds of a 3-minute budget unused."""

from __future__ import annotations

import pytest

from inferpool.cli.tune import lengths
from inferpool.cli.tune.budget import Budget
from inferpool.cli.tune.confirm import reserve
from inferpool.cli.tune.trials import STOP_SECONDS
from tests.unit.cli.test_tune_servers import clock, make_trials  # noqa: F401  (clock: a fixture)


@pytest.mark.parametrize(("budget_seconds", "candidates"), [(180, 5), (180, 1), (600, 12), (60, 30)])
def test_the_trials_fill_what_the_budget_leaves_them_and_no_more(tmp_path, clock, budget_seconds, candidates):  # noqa: F811
    trials = make_trials(tmp_path, Budget(budget_seconds, start=clock.now))
    trials.startups.append(3.0)
    trials.budget.reserve = reserve(budget_seconds) + trials.again_seconds()
    shortest = trials.plan.seconds
    clock.now += 20  # the costs and the defaults' trial
    lengths.spread(trials, candidates, shortest)
    seconds = trials.plan.seconds
    assert shortest <= seconds <= lengths.MAX_SECONDS
    spent = candidates * trials.estimate() + trials.again_seconds()
    if shortest < seconds < lengths.MAX_SECONDS:  # neither bound: the budget sized it
        assert spent == pytest.approx(trials.budget.for_trials() + trials.again_seconds(), rel=0.05)
    # The reserve grew with the defaults' longer repeat: the confirmation keeps its own seconds.
    assert trials.budget.reserve == pytest.approx(reserve(budget_seconds) + trials.again_seconds())
    assert trials.estimate() == pytest.approx(3.0 + trials.measuring(seconds) + STOP_SECONDS)


def test_the_defaults_are_measured_for_a_share_of_the_budget(tmp_path, clock):  # noqa: F811
    trials = make_trials(tmp_path, Budget(180, start=clock.now))
    lengths.for_defaults(trials)
    assert trials.plan.seconds == pytest.approx(180 * lengths.DEFAULTS_SHARE)
    trials = make_trials(tmp_path, Budget(3600, start=clock.now))
    lengths.for_defaults(trials)
    assert trials.plan.seconds == lengths.MAX_SECONDS
