"""One owner of the CPU split (inferpool.service.models.budget.cpu_shares): the host, the budget check,
the commands' pre-flight and the bench all split the CPUs alike."""

from __future__ import annotations

from inferpool.config import Settings
from inferpool.service.models.budget import cpu_shares, pool_plans
from inferpool.service.models.host import plans, settings_shares


def test_processes_times_models_with_an_unsized_process_count_as_one():
    assert cpu_shares(2, 3) == 6
    assert cpu_shares(0, 2) == 2  # workers = 0: not sized yet
    assert cpu_shares(3, 0) == 3


def test_the_settings_split_is_the_budget_checks_split():
    settings = Settings(workers=2, models=[{"source": "inferpool.engine.zoo.digits:build", "name": "second"}])
    assert settings_shares(settings) == 4
    pools = [(plan.source, plan.options) for plan in plans(settings)]
    planned = pool_plans(pools, processes=2, cpus=8, oversubscribe=False)
    assert [plan.cpus for plan in planned] == [8 // settings_shares(settings)] * 2
