"""A model repository held to the CPU budget (no server): the set started with, each load and
each poll rescan, refused with the numbers and what to lower."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferpool.config import Settings
from inferpool.engine import ConfigError, RuntimeOptions
from inferpool.service.models import plans as plans_module
from inferpool.service.models.budget import OverBudget, pool_plans
from inferpool.service.models.plans import plans, sized, startup_plans
from inferpool.service.models.repository_calls import Refused, RepositoryCalls

CPUS = 4


@pytest.fixture(autouse=True)
def four_cpus(monkeypatch):
    monkeypatch.setattr(plans_module, "usable_cpus", lambda: CPUS)


def version(root: Path, model: str, number: int) -> None:
    folder = root / model / str(number)
    folder.mkdir(parents=True)
    (folder / "model.pt2").write_bytes(b"not read: nothing is loaded here")


def test_pools_split_the_cpus_and_a_set_that_does_not_fit_is_refused():
    auto, two = RuntimeOptions(), RuntimeOptions(num_runtimes=2)
    assert [p.runtimes for p in pool_plans([("a", auto), ("b", two)], 1, 4, False)] == [2, 2]
    assert [p.runtimes for p in pool_plans([("a", auto)], 2, 4, False)] == [2]
    with pytest.raises(OverBudget, match=r"2 serving processes x 3 models = 6 runtime pools .* 4 CPUs .*workers to 1"):
        pool_plans([("a", auto)] * 3, 2, 4, False)
    with pytest.raises(OverBudget, match=r"serve at most 4 models, serve fewer models \(unload one\)"):
        pool_plans([("a", auto)] * 5, 1, 4, False)
    with pytest.raises(OverBudget, match=r"^b: num_runtimes=2 x intra_op_threads=1 = 2 threads.*lower num_runtimes"):
        pool_plans([("a", auto), ("b", two)], 2, 4, False)
    oversubscribed = pool_plans([("a", auto)] * 5, 2, 4, True)  # allowed: one runtime each
    assert {p.runtimes for p in oversubscribed} == {1}


def test_start_with_a_repository_counts_its_models_and_must_fit(tmp_path):
    for model in ("m", "n"):
        version(tmp_path, model, 1)
    settings = Settings(model_repository=tmp_path)
    assert sized(settings).workers == 1  # 3 models of one runtime each: one process on 4 CPUs
    assert sized(Settings()).workers == CPUS  # without a repository, as before
    with pytest.raises(ConfigError, match="2 serving processes x 3 models = 6 runtime pools"):
        sized(Settings(model_repository=tmp_path, workers=2))
    assert sized(Settings(model_repository=tmp_path, workers=2, runtime=RuntimeOptions(oversubscribe=True)))


def test_a_load_over_the_budget_is_a_409_naming_what_to_lower(tmp_path):
    version(tmp_path, "m", 1)
    settings = Settings(model_repository=tmp_path, model_control_mode="explicit", workers=2)
    calls = RepositoryCalls(settings, startup_plans(settings))  # the config's model and m: 4 pools on 4 CPUs
    for model in ("n", "o"):
        version(tmp_path, model, 1)
    with pytest.raises(Refused) as refused:
        calls.load("n", {})
    assert refused.value.status == 409
    assert str(refused.value) == (
        "cannot load 'n': 2 serving processes x 3 models = 6 runtime pools of at least one thread each, but this "
        "server may use 4 CPUs (affinity and cgroup quota): lower workers to 1, serve fewer models (unload one), "
        "or set runtime.oversubscribe=true to run over the budget; the models served are unchanged"
    )
    calls.served(calls.unload("m"))
    assert [plan.name for plan in calls.load("n", {})] == [None, "n"]  # room again
    big = {"parameters": {"config": '{"runtime": {"num_runtimes": 3}}'}}
    with pytest.raises(Refused, match=r"model 'n' version 1: num_runtimes=3 x intra_op_threads=1 = 3 threads"):
        calls.load("n", big)


def test_a_poll_rescan_keeps_what_serves_for_a_change_that_does_not_fit(tmp_path):
    version(tmp_path, "m", 1)
    settings = Settings(model_repository=tmp_path, model_control_mode="poll", workers=2)
    calls = RepositoryCalls(settings, startup_plans(settings))
    version(tmp_path, "m", 2)  # m's latest changes: fits (it replaces version 1)
    version(tmp_path, "n", 1)  # a third model: 6 pools on 4 CPUs
    wanted = calls.rescan()
    assert [(plan.name, plan.version) for plan in wanted] == [(None, "1"), ("m", "2")]
    assert calls.failures["n"].startswith("not loaded: 2 serving processes x 3 models")
    calls.served(wanted)
    index = {(e["name"], e["version"]): e for e in calls.index()}
    assert index["n", "1"]["reason"].startswith("not loaded: 2 serving processes x 3 models")
    assert index["m", "2"]["state"] == "READY"
    assert plans(settings) == calls.static
