"""A model repository held to the CPU budget on a real server pinned to 2 CPUs: loads that do not
fit are refused (409, naming the numbers and what to lower) and change nothing, the pools of the
models served are re-split as models come and go, and a start over the budget is refused."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest

from inferpool.engine.plan.threads import usable_cpus
from inferpool.harness.metrics import metric_total
from inferpool.harness.server import INFERPOOL, Server, run_server, wait_ready
from tests.e2e.service.test_repository import ONES, add_version

CPUS = 2


@contextmanager
def two_cpus() -> Iterator[None]:
    """This process (and the servers it starts, which inherit it) on 2 CPUs."""
    if usable_cpus() < CPUS:
        pytest.skip(f"needs {CPUS} usable CPUs")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:CPUS])
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def runtimes(server: Server, model: str) -> int:
    return int(httpx2.get(f"{server.url}/v2/models/{model}/config", timeout=10).json()["runtimes"])


def _runtime_gauges(server: Server) -> dict[str, float]:
    text = httpx2.get(server.url + "/metrics", timeout=10).text
    return {name: metric_total(text, "inferpool_runtimes", model=name) for name in ("digits", "other")}


def call(server: Server, op: str, model: str, body: object = None) -> httpx2.Response:
    return httpx2.post(f"{server.url}/v2/repository/models/{model}/{op}", json=body or {}, timeout=120)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """'scale' (versions 1 and 2, none served at start) and 'other' (version 1)."""
    root = tmp_path / "repository"
    for number in (1, 2):
        add_version(root, number)
    (root / "scale" / "config.toml").write_text("version_policy = {specific = [7]}")
    other = root / "other" / "1"
    other.mkdir(parents=True)
    (other / "config.toml").write_text('source = "tests.support.extra_models:affine"\n')
    (root / "other" / "config.toml").write_text("version_policy = {specific = [7]}")
    return root


def test_loads_over_the_budget_are_refused_and_pools_are_re_split(tmp_path, repository):
    args = ("--model-repository", str(repository), "--model-control-mode", "explicit", "--workers", "1")
    with two_cpus(), run_server(tmp_path, *args, "--runtime.backend", "eager") as server:
        wait_ready(server)
        assert runtimes(server, "digits") == 2  # alone: both CPUs

        (repository / "scale" / "config.toml").write_text("version_policy = {latest = 1}")
        assert call(server, "load", "scale").status_code == 200
        assert (runtimes(server, "digits"), runtimes(server, "scale")) == (1, 1)  # re-split: one CPU each

        (repository / "other" / "config.toml").unlink()
        refused = call(server, "load", "other")
        assert refused.status_code == 409
        assert refused.json()["error"] == (
            "cannot load 'other': 1 serving processes x 3 models = 3 runtime pools of at least one thread each, but "
            "this server may use 2 CPUs (affinity and cgroup quota): serve at most 2 models, serve fewer models "
            "(unload one), or set runtime.oversubscribe=true to run over the budget; the models served are unchanged"
        )
        (repository / "scale" / "config.toml").write_text('version_policy = "all"')  # versions 1 and 2: 3 pools
        assert call(server, "load", "scale").status_code == 409
        big = {"parameters": {"config": '{"runtime": {"backend": "eager", "num_runtimes": 2}}'}}
        (repository / "scale" / "config.toml").write_text("version_policy = {latest = 1}")
        too_big = call(server, "load", "scale", big)  # its own share is one CPU
        assert too_big.status_code == 409
        assert "model 'scale' version 2: num_runtimes=2 x intra_op_threads=1 = 2 threads" in too_big.json()["error"]
        assert "lower num_runtimes or intra_op_threads" in too_big.json()["error"]
        answer = httpx2.post(server.url + "/predict/scale", json=ONES, timeout=30)
        assert answer.json()["outputs"]["mul"][0][0] == 2.0  # what served serves on
        assert httpx2.post(server.url + "/predict/other", json=ONES, timeout=30).status_code == 404

        assert call(server, "unload", "scale").status_code == 200
        assert runtimes(server, "digits") == 2  # alone again: grown back
        assert call(server, "load", "other").status_code == 200  # room now
        assert (runtimes(server, "digits"), runtimes(server, "other")) == (1, 1)
        # The gauges sum over live processes: the replaced one counts until it has exited.
        deadline = time.monotonic() + 30
        while (gauges := _runtime_gauges(server)) != {"digits": 1.0, "other": 1.0} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gauges == {"digits": 1.0, "other": 1.0}
    assert server.output().count("model change refused (409)") == 3


def test_a_start_over_the_budget_is_refused(repository):
    (repository / "scale" / "config.toml").unlink()
    command = [INFERPOOL, "serve", "--port", "0", "--model-repository", str(repository), "--workers", "2"]
    with two_cpus():
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert (
        "inferpool: invalid configuration: 2 serving processes x 2 models = 4 runtime pools of at least one thread "
        "each, but this server may use 2 CPUs (affinity and cgroup quota): lower workers to 1" in result.stderr
    )
