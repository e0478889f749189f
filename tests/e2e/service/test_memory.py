"""The serving tree's memory with no flags (the digits model, one serving process per CPU):
what each process holds for itself, read from /proc/PID/smaps_rollup of a real server, and a
cold start (empty compile cache) that builds in a child and serves without its builders' modules.

Private pages are the ones that count here: they are this process's alone whatever else runs
on the machine (PSS also divides shared library pages with any other process that maps them,
so on a shared host it moves with the neighbours)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2
import numpy as np

from inferpool.harness.payloads import DIGIT, PAYLOADS
from inferpool.harness.server import Server, inferpool_serve, launch, run_server, wait_ready
from tests.e2e.service.test_processes import serving_pids

MIB = 2**20
CHILD_PRIVATE_LIMIT = 26 * MIB
"""A serving process's own pages after it served (measured 14-17 MiB; 32 MiB when each process
imported the app after its fork)."""
SUPERVISOR_CODE_LIMIT = 24 * MIB
"""The supervisor's file pages no other process maps, once it has paged out its loading code
(measured under 10 MiB; ~100 MiB of libtorch and onnxruntime code before, on a host where no
other process mapped them)."""


def rollup(pid: int) -> dict[str, int]:
    lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines}


def served(server: Server) -> None:
    for name in ("digits-json", "digits-v2-json"):
        payload = PAYLOADS[name]()
        for _ in range(50):  # a new connection each: every process answers some, its lazy state counts
            answer = httpx2.post(server.url + payload.path, content=payload.body, headers=dict(payload.headers))
            assert answer.status_code == 200, answer.text


def test_serving_processes_share_the_app_and_the_supervisor_pages_out_its_loading_code(tmp_path):
    with run_server(tmp_path) as server:
        wait_ready(server)
        served(server)
        deadline = time.monotonic() + 10
        while (supervisor := rollup(server.process.pid))["Private_Clean"] > SUPERVISOR_CODE_LIMIT:
            assert time.monotonic() < deadline, (supervisor, server.output())
            time.sleep(0.2)
        children = {pid: rollup(pid) for pid in serving_pids(server)}
    for pid, pages in children.items():
        assert pages["Private_Dirty"] < CHILD_PRIVATE_LIMIT, (pid, pages["Private_Dirty"] / MIB)


def mapped_files(pid: int) -> set[str]:
    return {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/" in line}


def test_a_cold_start_builds_its_cache_then_serves_from_it_without_the_builders(tmp_path, reference):
    cache = tmp_path / "cache"  # empty: the export and the backend race run at this start
    with launch(inferpool_serve(), tmp_path, env={"XDG_CACHE_HOME": str(cache)}, ready_timeout=180) as server:
        supervisor = server.process.pid
        answer = httpx2.post(server.url + "/predict", json={"inputs": DIGIT.tolist()})
        processes = [supervisor, *serving_pids(server)]
        maps = {pid: mapped_files(pid) for pid in processes}
    for pid, files in maps.items():  # onnx's C++ extension: loaded by the export, never by serving
        assert not [path for path in files if "onnx_cpp2py_export" in path], pid
    log = server.output()
    assert "building them in a child process" in log, log
    assert log.count("model 'digits' ready in") == 2, log  # built in the child, then loaded warm here
    assert "as chosen at an earlier start" in log, log  # ... from the choice the child cached
    assert any(cache.iterdir())
    assert answer.status_code == 200, answer.text
    probabilities, label = reference(DIGIT[None])
    np.testing.assert_allclose(answer.json()["outputs"]["probabilities"], probabilities[0], rtol=1e-4, atol=1e-5)
    assert answer.json()["outputs"]["label"] == int(label[0])


def test_serving_processes_import_nothing_after_the_fork(tmp_path):
    """A module a serving process imports for itself is a private copy in each: everything they
    run (the app, uvicorn's protocols, FastAPI's lifespan) is imported by the supervisor first."""
    env = {"PYTHONPROFILEIMPORTTIME": "1"}  # every import prints a line on stderr, into the log
    with launch(inferpool_serve(), tmp_path, env=env) as server:
        served(server)
        log = server.output()
    frozen = log.rindex("startup objects out of the GC")  # the supervisor's last step before its forks
    late = [line for line in log[frozen:].splitlines() if line.startswith("import time:")]
    assert not late, late
