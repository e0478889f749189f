"""Each process of the serving tree's CPU time and memory, read from /proc when /metrics is scraped.

prometheus-client's own process collector does not run in multiprocess mode (it would report only
the process that happens to answer the scrape), so the dashboard had no per-process CPU. The
process answering a scrape reads every process of its tree instead: the supervisor (its parent)
and the supervisor's children, the serving processes. Nothing is recorded per request; a scrape
reads two small /proc files per process (~20 µs each).

Outside Linux, or where /proc says nothing, the families are empty rather than wrong.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
LABELS = ("role", "pid")


def tree(supervised: bool) -> list[tuple[str, int]]:
    """``(role, pid)`` for every process serving here: under the supervisor (``supervised``),
    it and its children; without one (the app in-process), this process alone."""
    if not supervised:
        return [("serving", os.getpid())]
    supervisor = os.getppid()
    try:
        children = (PROC / str(supervisor) / "task" / str(supervisor) / "children").read_text().split()
    except OSError:  # no CONFIG_PROC_CHILDREN: this process is still known to serve
        children = [str(os.getpid())]
    return [("supervisor", supervisor), *(("serving", int(pid)) for pid in children)]


def usage(pid: int) -> tuple[float, int, int | None] | None:
    """CPU seconds (user + system), resident bytes and proportional set size bytes (None where
    smaps_rollup is unreadable); None when the process is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and ')'
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    resident = int(fields[21]) * PAGE
    return cpu, resident, _pss(pid)


def _pss(pid: int) -> int | None:
    try:
        with open(PROC / str(pid) / "smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class ServingProcesses(Collector):
    """The tree's ``inferpool_process_*`` families, by role and pid."""

    def __init__(self, supervised: bool) -> None:
        self.supervised = supervised

    def collect(self) -> Iterator[Metric]:
        cpu = CounterMetricFamily(
            "inferpool_process_cpu_seconds", "CPU time (user + system) of each serving-tree process.", labels=LABELS
        )
        resident = GaugeMetricFamily(
            "inferpool_process_resident_memory_bytes", "Resident memory of each serving-tree process.", labels=LABELS
        )
        proportional = GaugeMetricFamily(
            "inferpool_process_pss_bytes",
            "Proportional set size of each serving-tree process: shared pages split among their users, so the "
            "tree's sum is what it holds.",
            labels=LABELS,
        )
        for role, pid in tree(self.supervised):
            found = usage(pid)
            if found is None:
                continue
            labels = [role, str(pid)]
            cpu.add_metric(labels, found[0])
            resident.add_metric(labels, float(found[1]))
            if found[2] is not None:
                proportional.add_metric(labels, float(found[2]))
        yield from (cpu, resident, proportional)
