"""Server processes for load tests: start one (optionally pinned to CPUs), and read its whole
process tree's RSS and CPU time from /proc. Linux only; 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

from loadtest.server import REPO_ROOT, Server, free_port

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


@dataclass
class Proc(Server):
    """A started server (InferPool or a peer) with the name it is reported under."""

    name: str = ""


@contextmanager
def launch(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    *,
    port: int,
    ready_path: str = "/health/ready",
    cpus: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
    ready_timeout: float = 120.0,
) -> Iterator[Proc]:
    """Run ``argv`` (which must listen on 127.0.0.1:``port``) until ``ready_path`` answers 200.
    ``cpus`` pins it (and every process and thread it starts) with ``taskset``."""
    prefix = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    log = log_dir / f"{name.replace(' ', '_').replace('/', '_')}-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*prefix, *argv],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO_ROOT), **(env or {})},
            start_new_session=True,
        )
    proc = Proc(f"http://127.0.0.1:{port}", process, log, name)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{proc.output()[-4000:]}")
            try:
                if httpx2.get(proc.url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready in {ready_timeout}s:\n{proc.output()[-4000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        # The whole session: some servers (LitServe) leave their worker processes behind when
        # only the parent is terminated.
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        time.sleep(0.5)
        _signal_group(process.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def inferpool_argv(port: int, *args: str) -> list[str]:
    from loadtest.server import INFERPOOL

    return [INFERPOOL, "serve", "--host", "127.0.0.1", "--port", str(port), *args]


__all__ = [
    "Proc", "free_port", "inferpool_argv", "launch", "tree", "tree_cpu_seconds", "tree_pss_bytes", "tree_rss_bytes",
]  # fmt: skip
