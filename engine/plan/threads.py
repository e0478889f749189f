"""The thread budget: what this process may really use, and torch's thread settings.

``os.cpu_count()`` reports the host's CPUs, not the ones a container or ``taskset`` grants;
sizing pools from it oversubscribes the CPU quota and turns every request into a wait for
the CFS scheduler. The budget counts the CPU affinity mask and the cgroup v2/v1 quota.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from inferpool.engine.errors import ConfigError
from inferpool.engine.options import RuntimeOptions

log = logging.getLogger(__name__)


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by the cgroup quota, or None when unlimited or unknown."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    cpus = len(os.sched_getaffinity(0))
    limit = cgroup_cpu_limit()
    return max(1, min(cpus, math.floor(limit))) if limit else cpus


@dataclass(frozen=True)
class ThreadPlan:
    cpus: int
    runtimes: int
    intra_op_threads: int

    @property
    def threads(self) -> int:
        return self.runtimes * self.intra_op_threads


def plan_threads(options: RuntimeOptions, cpus: int | None = None, shares: int = 1) -> ThreadPlan:
    """This pool's plan when ``shares`` pools (server processes x models) split the CPUs equally."""
    cpus = max(1, (usable_cpus() if cpus is None else cpus) // shares)
    intra = options.intra_op_threads
    runtimes = options.num_runtimes or max(1, cpus // intra)
    plan = ThreadPlan(cpus, runtimes, intra)
    if plan.threads > cpus:
        shared = f", split {shares} ways between processes and models" if shares > 1 else ""
        message = (
            f"num_runtimes={runtimes} x intra_op_threads={intra} = {plan.threads} threads, but this "
            f"process may use {cpus} CPUs (affinity and cgroup quota{shared}); lower num_runtimes or "
            "intra_op_threads (num_runtimes=0 sizes the pool automatically)"
        )
        if not options.oversubscribe:
            raise ConfigError(message + ", or set oversubscribe=true if the model releases the GIL")
        log.warning("%s; running oversubscribed as configured", message)
    return plan


def serving_processes(options: list[RuntimeOptions], cpus: int | None = None) -> int:
    """Processes for ``workers = 0``: as many as the budget holds when each gets every model's
    runtimes (one, when sized automatically) x intra-op threads. One process's HTTP work tops
    out near one core (its event loop holds the GIL), so with the defaults that is one process
    per usable CPU, each running one request at a time on its own core."""
    cpus = usable_cpus() if cpus is None else cpus
    per_process = sum((o.num_runtimes or 1) * o.intra_op_threads for o in options)
    return max(1, cpus // per_process)


def init_worker_thread(plan: ThreadPlan) -> None:
    """Give a new thread the plan's intra-op count. OpenMP's thread count is per thread: one
    that never set it gets a team of one thread per core on its first parallel op, whose
    spinning helper burned most of a core per worker in our measurements."""
    torch.set_num_threads(plan.intra_op_threads)


def apply_loading_plan(options: RuntimeOptions, shares: int = 1, *, forks: bool) -> ThreadPlan:
    """Plan a model's threads (refused over budget, see plan_threads) and apply the ones it is
    loaded, compiled and checked under; returns the plan its runtimes serve with.

    When serving processes are forked after loading (``forks``: ``inferpool serve`` always
    does), loading runs with one intra-op thread: threads do not survive a fork, and a parent
    that ran an OpenMP parallel region leaves its children hanging on their first one. What is
    compiled then is built for one thread too (AOTInductor sizes a package's OpenMP regions by
    torch's thread count at compile time), so ``inferpool compile`` applies the same plan to
    build the artifacts ``serve`` will find."""
    plan = plan_threads(options, shares=shares)
    apply_thread_plan(replace(plan, intra_op_threads=1) if forks else plan)
    return plan


def apply_thread_plan(plan: ThreadPlan) -> None:
    """Set torch's process-wide thread counts (once; later calls keep the first values)."""
    torch.set_num_threads(plan.intra_op_threads)
    try:
        # Inter-op parallelism only serves TorchScript forks; requests already run in parallel.
        torch.set_num_interop_threads(1)
    except RuntimeError:
        log.debug("inter-op threads were already set; keeping %d", torch.get_num_interop_threads())
