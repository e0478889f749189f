"""The CPU budget of a model set: what a set of models may plan on the CPUs this server may use.

Every serving process runs one runtime pool per model, and the pools split the usable CPUs
(affinity mask and cgroup quota) equally: each gets ``cpus // (processes x models)`` and plans
its runtimes x intra-op threads within that share (inferpool.engine.plan.threads.plan_threads). A set fits
when every pool gets at least one CPU and its own plan fits its share; one that does not is
refused with the numbers and what to lower, unless ``runtime.oversubscribe`` says to run over
the budget anyway (every pool then gets one CPU at least). The config's models alone keep the
behaviour they always had (at least one runtime each, however many share the CPUs); a model
repository's sets, which change while serving, are held to the budget at start and at every
load (inferpool.service.models.plans.sized, inferpool.service.models.repository_calls).
"""

from __future__ import annotations

from collections.abc import Sequence

from inferpool.engine import ConfigError, RuntimeOptions
from inferpool.engine.plan.threads import ThreadPlan, plan_threads


def cpu_shares(processes: int, models: int) -> int:
    """The one split of the CPUs (every caller asks here): each serving process runs one pool per
    model, all of equal share. ``workers = 0``, not sized yet, counts as one process."""
    return max(1, processes) * max(1, models)


class OverBudget(ConfigError):
    """A model set that would plan more threads than the server may use CPUs."""


def pool_plans(
    pools: Sequence[tuple[str, RuntimeOptions]], processes: int, cpus: int, oversubscribe: bool
) -> list[ThreadPlan]:
    """Each pool's thread plan when ``processes`` serving processes each run ``pools`` (a name
    for messages, and its options) on ``cpus``; OverBudget saying what to lower when they do not
    fit and ``oversubscribe`` is off."""
    shares = cpu_shares(processes, len(pools))
    if shares > cpus and not oversubscribe:
        fitting = cpus // len(pools)
        lower = f"lower workers to {fitting}" if fitting >= 1 else f"serve at most {cpus} models"
        raise OverBudget(
            f"{processes} serving processes x {len(pools)} models = {shares} runtime pools of at least one thread "
            f"each, but this server may use {cpus} CPUs (affinity and cgroup quota): {lower}, serve fewer models "
            "(unload one), or set runtime.oversubscribe=true to run over the budget"
        )
    plans = []
    for name, options in pools:
        try:
            plans.append(plan_threads(options, cpus, shares))
        except ConfigError as exc:
            raise OverBudget(f"{name}: {exc}") from None
    return plans
