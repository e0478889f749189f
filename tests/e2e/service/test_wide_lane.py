"""One client, a compute-bound model, no flags: the call it makes runs on every core (the wide
lane, inferpool.engine.wide), not on one core while the other idles."""

from __future__ import annotations

import time

import httpx2
import numpy as np
import orjson

from inferpool.harness.server import inferpool_serve, launch
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
