"""The image's install and start steps, proven without a Docker engine.

No Docker engine runs here, so the Dockerfile's own instructions are replayed
(tests/support/dockerfile.py): its RUN commands create a fresh venv (python3 -m venv) in a
temporary root and pip-install the project exactly as written, COPY goes through
.dockerignore, and the final stage's CMD is started with the image's ENV. Differences from a
real build, all deliberate:

- build arg TORCH_INDEX_URL is empty: pip's configuration on this machine takes the CPU torch
  wheel from a local directory instead of the PyTorch index (the same RUN command, no
  --index-url); PIP_NO_CACHE_DIR is not set, so pip may reuse its cache;
- the final stage's only RUN (creating the image's user) is not executed: it would add a user
  to this machine;
- the server listens on 127.0.0.1 and a free port (INFERPOOL_HOST/INFERPOOL_PORT override the
  image's 0.0.0.0:8000), as every test server does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferpool.harness.server import free_port
from tests.support.dockerfile import Replay, Stage, healthcheck_command, parse

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
DIGIT_ZERO = [
    [0, 0, 5, 13, 9, 1, 0, 0],
    [0, 0, 13, 15, 10, 15, 5, 0],
    [0, 3, 15, 2, 0, 11, 8, 0],
    [0, 4, 12, 0, 0, 8, 8, 0],
    [0, 5, 8, 0, 0, 9, 8, 0],
    [0, 4, 11, 0, 1, 12, 7, 0],
    [0, 2, 14, 5, 10, 12, 0, 0],
    [0, 0, 6, 13, 10, 0, 0, 0],
]
USER_CREATION = re.compile(r"^groupadd .*&&\s*useradd ")


def _skip_user_creation(stage: Stage, command: str) -> bool:
    return stage.name == "runtime" and USER_CREATION.match(command) is not None


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    root = tmp_path_factory.mktemp("image-root")
    # The base image's interpreter: this machine's Python 3.11 (the one the test venv was made
    # from), first on PATH as python3/python, as /usr/local/bin is in python:3.11-slim.
    base_bin = root / "usr" / "local" / "bin"
    base_bin.mkdir(parents=True)
    interpreter = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in ("python3", "python"):
        (base_bin / name).symlink_to(interpreter)
    own_bin = str(Path(sys.prefix) / "bin")
    path = [str(base_bin)] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != own_bin]
    base_env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    base_env["PATH"] = os.pathsep.join(path)

    replay = Replay(
        DOCKERFILE,
        REPO,
        root,
        base_env=base_env,
        build_args={"TORCH_INDEX_URL": ""},
        rooted={"VIRTUAL_ENV", "APP_HOME"},
        unset={"PIP_NO_CACHE_DIR"},
        skip_run=_skip_user_creation,
        run_timeout=240,
        log=root / "build.log",
    )
    started = time.monotonic()
    final = replay.build()
    print(f"replayed the Dockerfile's build in {time.monotonic() - started:.0f}s")
    return replay, final


def _run_in_image(final: Stage, code: str) -> str:
    result = subprocess.run(
        ["python", "-c", code],
        cwd=final.env["APP_HOME"],
        env=final.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_build_installs_the_cpu_torch_and_the_project_into_the_venv(image):
    replay, final = image
    build, runtime = replay.stages
    assert (build.name, runtime.name) == ("build", "runtime")
    assert build.skipped_runs == []
    assert len(runtime.skipped_runs) == 1, "the final stage should only create the user"
    venv = Path(final.env["VIRTUAL_ENV"])
    assert venv.is_relative_to(replay.root)
    assert final.env["PATH"].split(os.pathsep)[0] == str(venv / "bin")

    out = _run_in_image(
        final,
        "import sys, torch, inferpool.engine as engine, inferpool.service as service, inferpool.config as config\n"
        "import inferpool.engine.zoo.digits as d\n"
        "from pathlib import Path\n"
        "print(torch.__version__, torch.version.cuda)\n"
        "for m in (engine, service, config): print(m.__file__)\n"
        "print(sorted(p.name for p in Path(d.__file__).parent.glob('*.pt')))\n"
        "print(sys.prefix)",
    )
    torch_line, *module_files, weights, prefix = out.splitlines()
    assert torch_line == "2.13.0+cpu None", "the image must hold the CPU-only torch build"
    assert prefix == str(venv)
    site = venv / "lib"
    for file in module_files:  # installed into the venv, not imported from the source tree
        assert Path(file).is_relative_to(site), file
    assert weights == "['digits_cnn.pt']", "the committed weights must be installed as package data"
    installed = subprocess.run(
        ["python", "-m", "pip", "list", "--format=freeze"], env=final.env, capture_output=True, text=True, check=True
    ).stdout
    assert not re.search(r"(?im)^nvidia-", installed), "no CUDA packages may enter the image"


def test_cmd_serves_ready_predict_metrics_and_drains_on_sigterm(image, tmp_path):
    _, final = image
    instructions = parse(DOCKERFILE.read_text())
    cmd = next(i for i in reversed(instructions) if i.keyword == "CMD").exec_form()
    assert cmd is not None
    health = healthcheck_command(next(i for i in instructions if i.keyword == "HEALTHCHECK"))
    assert isinstance(health, list)

    port, grpc_port = free_port(), free_port()
    env = {
        **final.env,
        "INFERPOOL_HOST": "127.0.0.1",
        "INFERPOOL_PORT": str(port),
        "INFERPOOL_GRPC_PORT": str(grpc_port),
        "HOME": str(tmp_path / "nonexistent"),  # the image's user has no home directory
    }
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(cmd, cwd=final.env["APP_HOME"], env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"not ready in 90 s:\n{log.read_text()}"
            try:
                if httpx2.get(url + "/health/ready", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            time.sleep(0.1)

        environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
        for var in (b"OMP_NUM_THREADS=1", b"MKL_NUM_THREADS=1"):
            assert var in environ, "the image's thread variables must reach the server"

        with httpx2.Client(base_url=url, timeout=10) as http:
            one = http.post("/predict", json={"inputs": [DIGIT_ZERO]})
            assert one.status_code == 200, one.text
            assert one.json()["outputs"]["label"] == 0
            batch = http.post("/predict", json={"inputs": [[DIGIT_ZERO]] * 3})
            assert batch.status_code == 200, batch.text
            assert batch.json()["outputs"]["label"] == [0, 0, 0]
            metrics = http.get("/metrics").text
            assert 'inferpool_inflight_requests{model="digits",version=""}' in metrics
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub: Any = health_pb2_grpc.HealthStub(channel)  # its stubs type the methods per channel kind
            check = stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert check.status == health_pb2.HealthCheckResponse.SERVING

        # The image's HEALTHCHECK command, run as Docker would, with the image's environment.
        healthy = subprocess.run(health, env=env, capture_output=True, timeout=10, check=False)
        assert healthy.returncode == 0, healthy.stderr

        # Exec-form CMD: the server itself is the process that gets SIGTERM, and it shuts down
        # cleanly within the drain period. uvicorn re-raises the signal after its graceful
        # shutdown, so the status is "terminated by SIGTERM" (143 in a container) or 0.
        process.send_signal(signal.SIGTERM)
        drain = int(final.env["INFERPOOL_DRAIN_SECONDS"])
        assert process.wait(drain + 10) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in log.read_text(), log.read_text()
        down = subprocess.run(health, env=env, capture_output=True, timeout=10, check=False)
        assert down.returncode != 0, "the HEALTHCHECK must fail when the server is down"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
