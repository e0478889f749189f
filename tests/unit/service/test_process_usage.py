"""The serving tree's per-process CPU and memory, read from /proc at scrape."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from inferpool.service.telemetry.process_usage import ServingProcesses, tree, usage


def test_usage_reads_this_process_cpu_and_memory():
    before = usage(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn 0.2 s of CPU
        pass
    after = usage(os.getpid())
    assert after is not None
    assert after[0] - before[0] >= 0.15
    assert after[1] > 10 * 2**20  # a Python with pytest loaded holds more than 10 MiB
    assert after[2] is not None
    assert 0 < after[2] <= after[1] * 1.05


def test_a_gone_process_has_no_usage():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert usage(child.pid) is None


def test_supervised_tree_is_the_parent_and_its_children():
    # This test process plays the supervisor: its children are the serving processes.
    code = "from inferpool.service.telemetry.process_usage import tree; print(tree(True))"
    earlier = _children()  # of other tests (multiprocessing's resource tracker after a spawn)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    finally:
        sibling.kill()
        sibling.wait()
    found = ast.literal_eval(out)
    assert found[0] == ("supervisor", os.getpid())
    serving = {pid for role, pid in found if role == "serving"} - earlier
    assert sibling.pid in serving
    assert len(serving) == 2  # the sibling and the process that asked


def _children() -> set[int]:
    tasks = Path(f"/proc/{os.getpid()}/task")
    return {int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()}


def test_unsupervised_tree_is_this_process():
    assert tree(False) == [("serving", os.getpid())]


def test_collector_exposes_the_three_families():
    registry = CollectorRegistry()
    registry.register(ServingProcesses(supervised=False))
    text = generate_latest(registry).decode()
    pid = os.getpid()
    for family in ("inferpool_process_cpu_seconds_total", "inferpool_process_resident_memory_bytes"):
        assert f'{family}{{pid="{pid}",role="serving"}}' in text, family
    assert "inferpool_process_pss_bytes{" in text
