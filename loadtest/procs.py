"""A server's whole process tree read from /proc: its members, RSS, PSS, CPU time, threads and
open file descriptors, and a thread that samples them. Linux only. (``inferpool.harness.server`` starts
the servers.)"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferpool.harness.procs import tree, tree_cpu_seconds  # re-exported: the loadtest modules import them here

__all__ = ["Sampler", "tree", "tree_counts", "tree_cpu_seconds", "tree_pss_bytes", "tree_rss_bytes"]


def tree_rss_bytes(pid: int) -> int:
    """Sum of VmRSS over the process tree (shared pages count once per process, as ps shows)."""
    return _tree_sum_kb(pid, "status", "VmRSS:") * 1024


def tree_pss_bytes(pid: int) -> int:
    """Sum of PSS over the process tree: each shared page divided among the processes sharing
    it, so the sum is what the tree really holds (/proc/PID/smaps_rollup)."""
    return _tree_sum_kb(pid, "smaps_rollup", "Pss:") * 1024


def _tree_sum_kb(pid: int, name: str, field: str) -> int:
    total = 0
    for member in tree(pid):
        try:
            lines = Path(f"/proc/{member}/{name}").read_text().splitlines()
        except OSError:
            continue  # exited meanwhile
        total += sum(int(line.split()[1]) for line in lines if line.startswith(field))
    return total


def tree_counts(pid: int) -> dict[str, int]:
    """RSS (KiB), threads and open file descriptors summed over the process tree (a supervisor
    and every serving process it forked)."""
    threads = fds = 0
    for member in tree(pid):
        with contextlib.suppress(OSError):  # a process that exited meanwhile
            threads += len(os.listdir(f"/proc/{member}/task"))
            fds += len(os.listdir(f"/proc/{member}/fd"))
    return {"rss_kb": tree_rss_bytes(pid) // 1024, "threads": threads, "fds": fds}


class Sampler(threading.Thread):
    """``measure(pid)`` at once and then every ``interval`` seconds until ``stop()``; each sample
    is ``{"t": seconds since the start, **figures}``."""

    def __init__(self, pid: int, interval: float, measure: Callable[[int], dict[str, Any]] = tree_counts) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.measure = pid, interval, measure
        self.samples: list[dict[str, Any]] = []
        self.started_at = time.monotonic()
        self._finished = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append({"t": round(time.monotonic() - self.started_at, 2), **self.measure(self.pid)})
            if self._finished.wait(self.interval):
                return

    def stop(self) -> list[dict[str, Any]]:
        self._finished.set()
        self.join()
        return self.samples
