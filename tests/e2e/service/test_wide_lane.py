"""One client, a compute-bound model, no flags: the call it makes runs on every core (the wide
lane, inferpool.engine.plan.wide), not on one core while the other idles."""

from __future__ import annotations

import time

import httpx2
import numpy as np
import orjson

from inferpool.harness.server import REPO_ROOT, inferpool_serve, launch
from loadtest.procs import tree_cpu_seconds

REQUESTS = 12


def test_one_client_uses_more_than_one_core_and_answers_as_eager():
    import torch

    from tests.support.compute_models import conv_stack

    spec = conv_stack()
    image = np.random.default_rng(0).random((1, 4, 64, 64), dtype=np.float32)
    with torch.inference_mode():
        want = spec.module(torch.from_numpy(image)).numpy()
    # `on`: the lane without its start-up gate, whose timing a machine busy with other tests can
    # sway (tests/unit/engine/test_wide.py checks the gate); what is measured here is the lane itself.
    command = inferpool_serve(
        "--model", "tests.support.compute_models:conv_stack", "--runtime.backend", "onnxruntime",
        "--runtime.lend-idle-cores", "on",
    )  # fmt: skip
    with launch(command, ready_timeout=240) as server, httpx2.Client(base_url=server.url, timeout=60) as client:
        config = client.get("/v2/models/convstack/config").json()
        assert config["wide_selection"]["enabled"], config["wide_selection"]
        # Encoded once: the client's own JSON work between calls would leave the server idle.
        body = orjson.dumps({"inputs": image.tolist()})
        headers = {"Content-Type": "application/json"}
        answer = client.post("/predict", content=body, headers=headers)  # warm: the first call allocates
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(np.asarray(answer.json()["outputs"]["features"]), want, rtol=1e-3, atol=1e-4)
        cpu, started = tree_cpu_seconds(server.process.pid), time.monotonic()
        for _ in range(REQUESTS):
            assert client.post("/predict", content=body, headers=headers).status_code == 200
        cores = (tree_cpu_seconds(server.process.pid) - cpu) / (time.monotonic() - started)
    # One request at a time: one core would give ~1.0 (the JSON decode is a small share of a call).
    assert cores > 1.5, f"the serving tree used {cores:.2f} CPUs per second of one client's requests"


def _wide_calls(client: httpx2.Client) -> float:
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("inferpool_wide_lane_calls_total{"))


def test_minilm_on_openvino_lends_in_the_forked_processes_and_answers_as_sentence_transformers():
    from tests.support.minilm_reference import SENTENCES, cosines, reference

    # The old code timed the openvino lane in the supervisor before the fork, and the serving
    # processes then hung compiling their own: this server never became ready. `on`, as above.
    command = inferpool_serve("--config", str(REPO_ROOT / "config" / "minilm.toml"), "--runtime.lend-idle-cores", "on")
    with launch(command, ready_timeout=180) as server, httpx2.Client(base_url=server.url, timeout=60) as client:
        wide = client.get("/v2/models/minilm/config").json()["wide_selection"]
        assert wide["enabled"], wide
        assert wide["wide_ms"] is not None  # measured (apart), not assumed
        texts = [SENTENCES[i % 4] for i in range(16)]  # 16 sentences: the call the lane is for
        answer = client.post("/predict", json={"inputs": texts})
        assert answer.status_code == 200, answer.text
        embedding = np.asarray(answer.json()["outputs"]["embedding"])
        assert embedding.shape == (16, 384)
        assert cosines(embedding, reference()[[i % 4 for i in range(16)]]).min() >= 0.999
        counted = 0.0
        for _ in range(20):  # each process refreshes its counters at most every 0.25 s
            assert client.post("/predict", json={"inputs": texts[:2]}).status_code == 200
            counted = _wide_calls(client)
            if counted:
                break
            time.sleep(0.3)
        assert counted > 0, "no call took the wide lane"
