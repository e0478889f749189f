"""The model repository on real servers, driven with Triton's own client (tritonclient.http):
index, load, unload, a broken version that leaves the old serving, versions addressed one by
one, control off in mode 'none', a swap under load that loses nothing and never mixes
versions, and the memory of an unloaded model given back."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx2
import numpy as np
import pytest
import torch
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from inferpool.harness.server import Server, free_port, run_server, wait_ready
from loadtest.procs import tree_pss_bytes
from tests.support.extra_models import WIDE_WEIGHT_BYTES

KEY = "repository-key"


def auth() -> dict[str, str]:
    """Fresh each time: tritonclient adds its own headers to the dict it is given."""
    return {"Authorization": f"Bearer {KEY}"}


ONES = {"inputs": [[1.0, 1.0, 1.0, 1.0]]}


class Scale(torch.nn.Module):
    """x * k: each version's answers say which version gave them."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = torch.nn.Parameter(torch.tensor(k), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


def add_version(root: Path, number: int, k: float | None = None) -> None:
    """Version ``number`` of model 'scale' multiplying by ``k`` (default: the number) as a .pt2."""
    folder = root / "scale" / str(number)
    folder.mkdir(parents=True)
    batch = torch.export.Dim("batch", min=1, max=256)
    program = torch.export.export(Scale(float(k or number)), (torch.zeros(2, 4),), dynamic_shapes=({0: batch},))
    torch.export.save(program, folder / "model.pt2")


def serve(tmp_path: Path, root: Path, mode: str, *extra: str):  # type: ignore[no-untyped-def]
    """Two processes of 2+ pools each on a small machine: over the CPU budget on purpose
    (test_repository_budget holds a repository to it)."""
    return run_server(
        tmp_path, "--model-repository", str(root), "--model-control-mode", mode, "--workers", "2",
        "--runtime.backend", "eager", "--runtime.oversubscribe", *extra,
    )  # fmt: skip


def scaled(server: Server, path: str = "/predict/scale") -> float:
    answer = httpx2.post(server.url + path, json=ONES, headers=auth(), timeout=30)
    assert answer.status_code == 200, answer.text
    return float(answer.json()["outputs"]["mul"][0][0])


def infer(client: triton.InferenceServerClient, version: str = "") -> float:
    x = triton.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), np.float32))
    return float(client.infer("scale", [x], model_version=version, headers=auth()).as_numpy("mul")[0, 0])


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repository"
    for number in (1, 2):
        add_version(root, number)
    return root


def test_index_load_unload_and_a_broken_version_with_tritonclient(tmp_path, repository, monkeypatch):
    monkeypatch.setenv("INFERPOOL_API_KEY", KEY)
    with serve(tmp_path, repository, "explicit") as server:
        wait_ready(server)
        client = triton.InferenceServerClient(server.url.removeprefix("http://"))
        # Start-up serves what the default policy selects: the latest version.
        assert client.get_model_repository_index(headers=auth()) == [
            {"name": "scale", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
            {"name": "scale", "version": "2", "state": "READY"},
        ]
        assert infer(client) == 2.0
        assert scaled(server) == 2.0
        assert httpx2.post(server.url + "/v2/repository/index").status_code == 401  # the key, always
        assert httpx2.post(server.url + "/v2/repository/models/scale/unload").status_code == 401

        (repository / "scale" / "config.toml").write_text('version_policy = "all"')
        client.load_model("scale", headers=auth())
        assert [entry["state"] for entry in client.get_model_repository_index(headers=auth())] == ["READY", "READY"]
        assert (infer(client, "1"), infer(client, "2"), infer(client)) == (1.0, 2.0, 2.0)
        assert client.is_model_ready("scale", "1", headers=auth())
        assert not client.is_model_ready("scale", "7", headers=auth())
        metadata = httpx2.get(server.url + "/v2/models/scale/versions/1", headers=auth()).json()
        assert metadata["versions"] == ["1"]

        too_big = '{"runtime": {"backend": "eager", "num_runtimes": 64}}'  # over the CPU budget: a 409
        with pytest.raises(InferenceServerException, match="lower num_runtimes or intra_op_threads"):
            client.load_model("scale", config=too_big, headers=auth())
        assert infer(client, "1") == 1.0

        broken = repository / "scale" / "3"
        broken.mkdir()
        (broken / "model.pt2").write_bytes(b"not an archive")
        with pytest.raises(InferenceServerException, match=r"failed to load 'scale': cannot load torch.export"):
            client.load_model("scale", headers=auth())
        assert (infer(client, "1"), infer(client)) == (1.0, 2.0)  # the old ones keep serving
        assert client.get_model_repository_index(headers=auth())[2]["reason"].startswith("cannot load torch.export")

        broken.joinpath("model.pt2").unlink()
        broken.rmdir()
        client.unload_model("scale", headers=auth())
        assert not client.is_model_ready("scale", headers=auth())
        assert httpx2.post(server.url + "/predict/scale", json=ONES, headers=auth()).status_code == 404
        assert {entry["state"] for entry in client.get_model_repository_index(headers=auth())} == {"UNAVAILABLE"}
        ready_only = httpx2.post(server.url + "/v2/repository/index", json={"ready": True}, headers=auth())
        assert ready_only.json() == []
        assert httpx2.get(server.url + "/health/ready").status_code == 200  # the config's model serves on
    errors = [line for line in server.output().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors  # the failed one's, logged once
    assert "model change failed, nothing changed: cannot load torch.export archive" in errors[0]
    assert "model change refused (409): cannot load 'scale': model 'scale' version 1: num_runtimes=64" in (
        server.output()
    )  # refused before anything was loaded: a warning


def test_mode_none_serves_versions_and_refuses_control(tmp_path, repository):
    (repository / "scale" / "config.toml").write_text("version_policy = {specific = [1]}")
    grpc_port = free_port()
    with serve(tmp_path, repository, "none", "--grpc-port", str(grpc_port)) as server:
        wait_ready(server)
        assert scaled(server) == 1.0
        assert httpx2.post(server.url + "/v2/models/scale/versions/2/infer", json={}).status_code == 404
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        x = triton_grpc.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("scale", [x], model_version="1").as_numpy("mul")[0, 0] == 1.0
        assert client.get_model_metadata("scale", "1").versions == ["1"]
        with pytest.raises(InferenceServerException, match="has no version '2'"):
            client.get_model_metadata("scale", "2")
        client.close()
        answer = httpx2.post(server.url + "/v2/repository/models/scale/load")
        assert answer.status_code == 403
        assert "--model-control-mode explicit" in answer.json()["error"]
        assert httpx2.post(server.url + "/v2/repository/index").json()[0]["state"] == "READY"


def test_a_swap_under_load_loses_nothing_and_never_mixes_versions(tmp_path, repository):
    outcomes: Counter[str] = Counter()
    stop = threading.Event()
    lock = threading.Lock()

    def client() -> None:
        with httpx2.Client(timeout=30) as http:
            while not stop.is_set():
                try:
                    answer = http.post(server.url + "/predict/scale", json=ONES)
                    values = set(answer.json()["outputs"]["mul"][0]) if answer.status_code == 200 else set()
                    kind = f"x{values.pop():g}" if len(values) == 1 else f"{answer.status_code}: {answer.text}"
                except httpx2.HTTPError as exc:
                    kind = f"broken: {exc!r}"
                with lock:
                    outcomes[kind] += 1

    with serve(tmp_path, repository, "explicit") as server:
        wait_ready(server)
        clients = [threading.Thread(target=client) for _ in range(8)]
        for thread in clients:
            thread.start()
        time.sleep(1.0)
        before = dict(outcomes)
        add_version(repository, 3)
        loaded = httpx2.post(server.url + "/v2/repository/models/scale/load", timeout=120)
        assert loaded.status_code == 200, loaded.text
        time.sleep(1.0)
        stop.set()
        for thread in clients:
            thread.join(30)
        assert scaled(server) == 3.0

    assert set(outcomes) == {"x2", "x3"}, outcomes  # no failure, and never a mix within an answer
    assert before.get("x2", 0) > 50, outcomes  # it ran before the swap, and after it
    assert outcomes["x3"] > 50, outcomes


def test_an_unloaded_model_gives_its_memory_back(tmp_path, repository):
    wide = tmp_path / "repository" / "wide" / "1"
    wide.mkdir(parents=True)
    (wide / "config.toml").write_text('source = "tests.support.extra_models:wide"\n')
    (tmp_path / "repository" / "wide" / "config.toml").write_text("version_policy = {specific = [7]}")  # none at start
    with serve(tmp_path, repository, "explicit") as server:
        wait_ready(server)
        time.sleep(1.0)
        before = tree_pss_bytes(server.process.pid)
        (tmp_path / "repository" / "wide" / "config.toml").unlink()
        assert httpx2.post(server.url + "/v2/repository/models/wide/load", timeout=120).status_code == 200
        loaded = tree_pss_bytes(server.process.pid)
        assert httpx2.post(server.url + "/v2/repository/models/wide/unload", timeout=120).status_code == 200
        deadline = time.monotonic() + 10  # the replaced processes exit once their connections are gone
        while (after := tree_pss_bytes(server.process.pid)) - before > WIDE_WEIGHT_BYTES * 0.25:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    print(
        f"PSS before load {before / 2**20:.0f} MiB, loaded {loaded / 2**20:.0f} MiB, unloaded {after / 2**20:.0f} MiB"
    )
    assert loaded - before > WIDE_WEIGHT_BYTES * 0.9  # one copy of the weights, shared
    assert after - before < WIDE_WEIGHT_BYTES * 0.25, (before, loaded, after)


def wait_for(check, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the server did not follow the repository in time"
        time.sleep(0.2)


def test_poll_mode_follows_the_repository(tmp_path, repository):
    def predict() -> httpx2.Response:
        return httpx2.post(server.url + "/predict/scale", json=ONES, timeout=30)

    with serve(tmp_path, repository, "poll", "--repository-poll-seconds", "0.5") as server:
        wait_ready(server)
        assert scaled(server) == 2.0
        assert httpx2.post(server.url + "/v2/repository/models/scale/unload").status_code == 403
        add_version(repository, 3)
        wait_for(lambda: scaled(server) == 3.0)

        broken = repository / "scale" / "4"
        broken.mkdir()
        (broken / "model.pt2").write_bytes(b"not an archive")
        wait_for(lambda: "reason" in httpx2.post(server.url + "/v2/repository/index").json()[-1])
        time.sleep(1.5)  # a few more scans: the broken version is not retried as long as it is the same
        assert scaled(server) == 3.0  # the old version keeps serving
        index = httpx2.post(server.url + "/v2/repository/index").json()
        assert index[-1]["reason"].startswith("cannot load torch.export archive"), index

        for path in sorted((repository / "scale").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repository / "scale").rmdir()
        wait_for(lambda: predict().status_code == 404)
        assert httpx2.post(server.url + "/v2/repository/index").json() == []
    errors = [line for line in server.output().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
