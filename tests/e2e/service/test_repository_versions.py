"""Model versions in what a real server reports: metrics series per model and version (counts
matching the requests each version answered, across a load), per-version readiness, and the
model and version on the log lines written for a request."""

from __future__ import annotations

import json

import httpx2
import numpy as np
import tritonclient.grpc as triton_grpc

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import Server, free_port, run_server, wait_ready
from tests.e2e.service.test_repository import add_version
from tests.support.fault_models import POISON

ONES = {"inputs": [[1.0, 1.0, 1.0, 1.0]]}
V2_ONES = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 1.0, 1.0, 1.0]}]}


def _post(server: Server, path: str, body: object) -> httpx2.Response:
    return httpx2.post(server.url + path, json=body, timeout=30)


def _scaled(server: Server, path: str, times: int) -> list[float]:
    """``times`` answers of 'scale' on ``path`` (/predict/scale or a v2 infer route)."""
    answers = []
    for _ in range(times):
        v2 = path.startswith("/v2")
        answer = _post(server, path, V2_ONES if v2 else ONES)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        answers.append(body["outputs"][0]["data"][0] if v2 else body["outputs"]["mul"][0][0])
    return answers


def _ready(server: Server, path: str) -> httpx2.Response:
    return httpx2.get(server.url + path, timeout=10)


def test_metrics_readiness_and_logs_carry_the_version(tmp_path):
    root = tmp_path / "repository"
    add_version(root, 1)
    (root / "scale" / "config.toml").write_text('version_policy = "all"')
    poison = root / "poison" / "1"
    poison.mkdir(parents=True)
    (poison / "config.toml").write_text(
        'source = "tests.support.fault_models:raising"\n[runtime]\nbackend = "eager"\ndispatch = "inline"\n'
    )
    # Four pools once version 2 loads, in one process: over a 2-CPU budget, on purpose.
    grpc_port = free_port()
    args = (
        "--model-repository", str(root), "--model-control-mode", "explicit", "--workers", "1",
        "--grpc-port", str(grpc_port),
        "--runtime.backend", "eager", "--runtime.oversubscribe", "--log-format", "json",
    )  # fmt: skip
    with run_server(tmp_path, *args) as server:
        wait_ready(server)
        assert _scaled(server, "/predict/scale", 5) == [1.0] * 5
        assert _scaled(server, "/v2/models/scale/versions/1/infer", 2) == [1.0] * 2
        for _ in range(3):
            assert _post(server, "/predict", {"inputs": [[[0.0] * 8] * 8]}).status_code == 200
        assert _ready(server, "/v2/models/scale/versions/1/ready").json() == {
            "name": "scale",
            "version": "1",
            "ready": True,
        }
        assert _ready(server, "/v2/models/scale/versions/2/ready").status_code == 404

        add_version(root, 2)
        assert _post(server, "/v2/repository/models/scale/load", {}).status_code == 200
        assert _scaled(server, "/predict/scale", 4) == [2.0] * 4  # the latest: version 2
        assert _scaled(server, "/v2/models/scale/versions/1/infer", 1) == [1.0]
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        x = triton_grpc.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("scale", [x], model_version="1").as_numpy("mul")[0, 0] == 1.0  # gRPC: labelled too
        client.close()
        for version in ("1", "2"):
            ready = _ready(server, f"/v2/models/scale/versions/{version}/ready")
            assert (ready.status_code, ready.json()["version"]) == (200, version)
        assert _ready(server, "/v2/models/scale/ready").json()["version"] == "2"

        image = [[[POISON] * 8] * 8]
        failed = _post(server, "/predict/poison", {"inputs": image})
        assert failed.status_code == 500
        rid = failed.headers["x-request-id"]
        text = httpx2.get(server.url + "/metrics", timeout=10).text

    def count(**labels: str) -> float:
        return metric_total(text, "inferpool_inference_seconds_count", **labels)

    # Every series sent to each version, counted under it (the load replaced the process that
    # served version 1 alone: its counts stay in the shared metrics directory).
    assert count(model="scale", version="1") == 5 + 2 + 1 + 1
    assert count(model="scale", version="2") == 4
    assert metric_total(text, "inferpool_server_overhead_seconds_count", model="scale", version="2") == 4
    # The config's model keeps an empty version label, which Prometheus stores as none: the
    # series dashboards already query are unchanged.
    assert 'inferpool_inference_seconds_count{model="digits",version=""} 3.0' in text
    assert metric_total(text, "inferpool_runtimes", model="scale", version="2") == 1
    assert metric_total(text, "inferpool_build_info", model="scale", model_version="2") == 1

    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    failure = [line for line in lines if line["request_id"] == rid and line["level"] == "error"]
    assert failure, server.output()
    assert {(line["model"], line["version"]) for line in failure} == {("poison", "1")}
    loaded = [line["message"] for line in lines if line["message"].startswith("serving model=scale")]
    assert any("version=2" in message for message in loaded), loaded
