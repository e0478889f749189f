"""The model repository over gRPC on real servers, driven with Triton's own client
(tritonclient.grpc, unmodified): index, load with a config override, a load over the CPU budget
and a broken version that leave what serves serving, unload, the API key, and control off in
mode 'none'. The answers are REST's (tests/e2e/service/test_repository.py), as gRPC codes."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx2
import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import free_port, run_server, wait_ready
from inferpool.service.grpc import inference_pb2 as pb
from tests.e2e.service import test_repository
from tests.e2e.service.test_repository import add_version

KEY = "grpc-repository-key"
AUTH = {"authorization": f"Bearer {KEY}"}
INDEX = "/inference.GRPCInferenceService/RepositoryIndex"
repository = test_repository.repository  # the REST tests' fixture: model 'scale', versions 1 and 2


def serve(tmp_path: Path, root: Path, mode: str, grpc_port: int):  # type: ignore[no-untyped-def]
    """As test_repository's servers (over the CPU budget on purpose), with gRPC on."""
    return run_server(
        tmp_path, "--model-repository", str(root), "--model-control-mode", mode, "--workers", "2",
        "--runtime.backend", "eager", "--runtime.oversubscribe", "--grpc-port", str(grpc_port),
    )  # fmt: skip


def index(client: triton.InferenceServerClient) -> list[tuple[str, str, str, str]]:
    found = client.get_model_repository_index(headers=dict(AUTH))
    return [(entry.name, entry.version, entry.state, entry.reason) for entry in found.models]


def infer(client: triton.InferenceServerClient, version: str = "") -> float:
    x = triton.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), np.float32))
    return float(client.infer("scale", [x], model_version=version, headers=dict(AUTH)).as_numpy("mul")[0, 0])


def test_index_load_unload_and_a_broken_version_with_tritonclient_grpc(tmp_path, repository, monkeypatch):
    add_version(tmp_path / "spare", 5)  # scale/5/model.pt2 multiplies by 5: the override's source
    override = '{"source": "%s"}' % (tmp_path / "spare" / "scale" / "5" / "model.pt2")
    monkeypatch.setenv("INFERPOOL_API_KEY", KEY)
    port = free_port()
    with serve(tmp_path, repository, "explicit", port) as server:
        wait_ready(server)
        client = triton.InferenceServerClient(f"127.0.0.1:{port}")
        assert index(client) == [("scale", "1", "UNAVAILABLE", "unloaded"), ("scale", "2", "READY", "")]
        for call in (client.get_model_repository_index, lambda: client.load_model("scale")):
            with pytest.raises(InferenceServerException, match="missing or wrong API key") as caught:
                call()  # the key, always: no repository method is exempt
            assert caught.value.status() == "StatusCode.UNAUTHENTICATED"

        client.load_model("scale", config=override, headers=dict(AUTH))  # REST's {"parameters": {"config": ...}}
        assert infer(client) == 5.0  # version 2, served from the override's source

        too_big = '{"runtime": {"backend": "eager", "num_runtimes": 64}}'
        with pytest.raises(InferenceServerException, match="lower num_runtimes or intra_op_threads") as caught:
            client.load_model("scale", config=too_big, headers=dict(AUTH))
        assert caught.value.status() == "StatusCode.FAILED_PRECONDITION"

        broken = repository / "scale" / "3"
        broken.mkdir()
        (broken / "model.pt2").write_bytes(b"not an archive")
        with pytest.raises(
            InferenceServerException, match=r"failed to load 'scale': cannot load torch.export"
        ) as caught:
            client.load_model("scale", headers=dict(AUTH))
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert infer(client) == 5.0  # what served keeps serving
        assert index(client)[2][3].startswith("cannot load torch.export")

        broken.joinpath("model.pt2").unlink()
        broken.rmdir()
        client.unload_model("scale", headers=dict(AUTH), unload_dependents=True)
        with pytest.raises(InferenceServerException, match="model 'scale' is not served here") as caught:
            infer(client)  # at once: the process that answered the unload takes no more calls
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        assert {state for _, _, state, _ in index(client)} == {"UNAVAILABLE"}
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            ready_only = channel.unary_unary(
                INDEX,
                request_serializer=pb.RepositoryIndexRequest.SerializeToString,
                response_deserializer=pb.RepositoryIndexResponse.FromString,
            )
            assert ready_only(pb.RepositoryIndexRequest(ready=True), metadata=tuple(AUTH.items())).models == []
        client.close()
        metrics = httpx2.get(server.url + "/metrics").text
    errors = [line for line in server.output().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors  # the broken version's, logged once
    for rpc, code in [("RepositoryModelLoad", "OK"), ("RepositoryModelLoad", "INVALID_ARGUMENT"),
                      ("RepositoryModelUnload", "OK"), ("RepositoryIndex", "UNAUTHENTICATED")]:  # fmt: skip
        assert metric_total(metrics, "inferpool_grpc_requests_total", rpc=rpc, code=code) >= 1, (rpc, code)


def test_mode_none_refuses_load_and_unload_over_grpc(tmp_path, repository):
    port = free_port()
    with serve(tmp_path, repository, "none", port) as server:
        wait_ready(server)
        with triton.InferenceServerClient(f"127.0.0.1:{port}") as client:
            assert [entry.state for entry in client.get_model_repository_index().models] == ["UNAVAILABLE", "READY"]
            for call in (client.load_model, client.unload_model):
                with pytest.raises(InferenceServerException, match="--model-control-mode explicit") as caught:
                    call("scale")
                assert caught.value.status() == "StatusCode.PERMISSION_DENIED"
            assert infer(client) == 2.0
