"""A process tree's members and CPU time, from /proc (Linux only): what ``inferpool bench``
reads of the servers it starts (loadtest/procs.py reads more, from these)."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """pid and all its descendants (from /proc/*/stat parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process tree so far (utime + stime of each member)."""
    total = 0
    for member in tree(pid):
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def tree_run_seconds(pid: int) -> float:
    """CPU seconds the process tree's live threads have run (/proc/.../schedstat, in ns): exact
    where tree_cpu_seconds counts clock ticks (10 ms), but without threads that have exited, so
    only for a span over which the threads live (a started server's)."""
    total = 0
    for member in tree(pid):
        try:
            tasks = list(Path(f"/proc/{member}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
    return total / 1e9
