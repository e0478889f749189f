"""The image itself, run by a real Docker engine (``make test-image`` builds it, see .ci/image.py).

Every container uses the host network and listens on 127.0.0.1 and free ports only (the image's
``INFERPOOL_HOST=0.0.0.0`` is overridden, as every test server's host is), and is removed when
its test ends. Checked from outside, as a user would: the user id the server runs as, readiness,
the README's curl, a v2 binary request and gRPC with Triton's own clients, the image's
HEALTHCHECK reaching ``healthy``, ``--cpus`` turning into serving processes, a mounted ``.pt2``,
and SIGTERM under load answering every request sent (the host's check, tests/support/drain_check.py).
Skipped only where no Docker engine answers; ``make test-image`` starts one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import numpy as np
import pytest
import torch
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from inferpool.engine.zoo.digits import build
from inferpool.harness.server import free_port
from tests.support.drain_check import looping_clients

IMAGE = os.environ.get("INFERPOOL_IMAGE", "inferpool:test")
README = Path(__file__).resolve().parents[3] / "README.md"
DRAIN_SECONDS = 10  # the image's INFERPOOL_DRAIN_SECONDS


def _engine() -> str | None:
    """Why no container can run here, or None."""
    if shutil.which("docker") is None:
        return "no docker client on PATH (make test-image installs Debian's docker.io and starts dockerd)"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30, check=False)
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["docker info failed"])[-1]
        return f"no Docker engine answers ({last}); make test-image starts one"
    return None


NO_ENGINE = _engine()
pytestmark = pytest.mark.skipif(NO_ENGINE is not None, reason=str(NO_ENGINE))


def docker(*args: str, timeout: float = 60) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=True).stdout


@dataclass
class Container:
    id: str
    port: int
    grpc_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inspect(self, template: str) -> str:
        return docker("inspect", "--format", template, self.id).strip()

    def logs(self) -> str:
        result = subprocess.run(["docker", "logs", self.id], capture_output=True, text=True, timeout=30, check=False)
        return result.stdout + result.stderr

    def wait_ready(self, seconds: float = 120) -> float:
        started, deadline = time.monotonic(), time.monotonic() + seconds
        while True:
            assert self.inspect("{{.State.Running}}") == "true", self.logs()
            assert time.monotonic() < deadline, f"not ready in {seconds} s:\n{self.logs()}"
            try:
                if httpx2.get(self.url + "/health/ready", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx2.TransportError:
                pass
            time.sleep(0.1)

    def serving_processes(self) -> int:
        pid = self.inspect("{{.State.Pid}}")  # the supervisor, PID 1 inside
        return len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


@pytest.fixture(scope="module")
def image() -> str:
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False).returncode != 0:
        pytest.fail(f"image {IMAGE} is missing: build it with `make test-image` (python3 .ci/image.py build)")
    return IMAGE


def start(image: str, *args: str, env: dict[str, str] | None = None) -> Container:
    port, grpc_port = free_port(), free_port()
    settings = {"INFERPOOL_HOST": "127.0.0.1", "INFERPOOL_PORT": str(port), "INFERPOOL_GRPC_PORT": str(grpc_port)}
    flags = [f"--env={k}={v}" for k, v in {**settings, **(env or {})}.items()]
    cid = docker("run", "--detach", "--network", "host", *flags, *args, image).strip()
    return Container(cid, port, grpc_port)


@pytest.fixture
def run(image: str) -> Iterator[Container | object]:
    started: list[Container] = []

    def _run(*args: str, env: dict[str, str] | None = None) -> Container:
        started.append(start(image, *args, env=env))
        return started[-1]

    yield _run
    for container in started:
        subprocess.run(["docker", "rm", "--force", container.id], capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def served(image: str) -> Iterator[Container]:
    # The image's HEALTHCHECK command, checked every 2 s instead of every 15 s.
    container = start(image, "--cpus", "2", "--health-interval", "2s")
    try:
        container.wait_ready()
        yield container
    finally:
        subprocess.run(["docker", "rm", "--force", container.id], capture_output=True, timeout=60, check=False)


def test_runs_as_the_non_root_user(served):
    pid = served.inspect("{{.State.Pid}}")
    uids = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
    assert uids.split()[1:] == ["10001"] * 4
    assert served.inspect("{{.Config.User}}") == "10001:10001"


def test_the_readmes_curl(served):
    line = next(line for line in README.read_text().splitlines() if line.startswith("curl -s localhost:8000/predict"))
    command = line.replace("localhost:8000", f"127.0.0.1:{served.port}")  # the line as written, run by a shell
    answer = json.loads(subprocess.run(command, shell=True, capture_output=True, check=True, timeout=30).stdout)
    assert answer["model"] == "digits"
    assert answer["outputs"]["label"] == 0


def test_v2_binary_and_grpc_with_tritons_clients(served, images, reference):
    probabilities, labels = reference(images[:4])
    http = triton_http.InferenceServerClient(f"127.0.0.1:{served.port}")
    tensor = triton_http.InferInput("image", list(images[:4].shape), "FP32")
    tensor.set_data_from_numpy(images[:4], binary_data=True)
    wanted = [triton_http.InferRequestedOutput(n, binary_data=True) for n in ("probabilities", "label")]
    result = http.infer("digits", [tensor], outputs=wanted)
    np.testing.assert_allclose(result.as_numpy("probabilities"), probabilities, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(result.as_numpy("label"), labels)
    http.close()

    grpc = triton_grpc.InferenceServerClient(f"127.0.0.1:{served.grpc_port}")
    assert grpc.is_server_ready()
    tensor = triton_grpc.InferInput("image", list(images[:4].shape), "FP32")
    tensor.set_data_from_numpy(images[:4])
    result = grpc.infer("digits", [tensor])
    np.testing.assert_allclose(result.as_numpy("probabilities"), probabilities, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(result.as_numpy("label"), labels)
    grpc.close()


def test_healthcheck_reaches_healthy_and_cpus_give_the_processes(served):
    deadline = time.monotonic() + 60
    while (health := served.inspect("{{.State.Health.Status}}")) != "healthy":
        assert health == "starting", served.inspect("{{json .State.Health}}")
        assert time.monotonic() < deadline, served.inspect("{{json .State.Health}}")
        time.sleep(0.5)
    assert served.serving_processes() == 2  # --cpus 2


def test_one_cpu_gives_one_serving_process(run):
    container = run("--cpus", "1")
    container.wait_ready()
    assert container.serving_processes() == 1


def test_a_mounted_pt2_is_served(run, tmp_path, images, reference):
    spec = build()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(spec.module.eval(), (torch.zeros(2, 1, 8, 8),), dynamic_shapes=({0: batch},))
    (tmp_path / "models").mkdir()
    torch.export.save(program, tmp_path / "models" / "model.pt2")
    (tmp_path / "models").chmod(0o755)
    (tmp_path / "models" / "model.pt2").chmod(0o644)  # readable by the image's uid 10001
    container = run("-v", f"{tmp_path / 'models'}:/models:ro", env={"INFERPOOL_MODEL": "/models/model.pt2"})
    container.wait_ready()
    answer = httpx2.post(container.url + "/predict", json={"inputs": images[:3].tolist()}, timeout=10)
    assert answer.status_code == 200, answer.text
    probabilities, _ = reference(images[:3])
    outputs = answer.json()["outputs"]
    values = outputs[next(iter(outputs))] if isinstance(outputs, dict) else outputs[0]
    np.testing.assert_allclose(np.asarray(values), probabilities, rtol=1e-4, atol=1e-5)


def test_sigterm_under_load_answers_every_request_sent_and_exits_0(run):
    container = run("--cpus", "2")
    ready_after = container.wait_ready()
    with looping_clients(container.url) as load:
        load.wait_answered(100)
        sent_at = time.monotonic()
        docker("kill", "--signal", "TERM", container.id)
        code = int(docker("wait", container.id, timeout=DRAIN_SECONDS + 20).strip())
        exited_after = time.monotonic() - sent_at
    logs = container.logs()
    kinds = load.kinds()
    print(f"ready after {ready_after:.1f} s; outcomes {dict(kinds)}; exited {exited_after:.1f} s after SIGTERM")
    assert code == 0, logs
    assert exited_after < DRAIN_SECONDS, logs
    assert not load.lost(), kinds
    assert kinds["200"] > 50, kinds
    assert load.answered_after(sent_at), "in-flight requests must finish"
    assert "new connections stopped before closing by: reuseport" in logs, logs
    assert "could not stop new connections" not in logs
