"""No flags, a mid-sized CNN, a real server: ``precision = "auto"`` shows its decision at
``/v2/models/{name}/config``, answers within its accuracy gate of eager fp32, and a lone client's
call runs on the wide lane, built in the precision served (bf16 too)."""

from __future__ import annotations

import httpx2
import numpy as np
import orjson

from inferpool.engine.backends.native_bf16 import native_bf16
from inferpool.engine.backends.precision_auto import SYNTHETIC_MIN_COSINE
from inferpool.harness.server import inferpool_serve, launch


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_auto_precision_shows_its_decision_and_answers_within_the_gate(tmp_path):
    import torch

    from tests.support.compute_models import conv_stack

    spec = conv_stack()
    images = np.random.default_rng(7).random((3, 1, 4, 64, 64), dtype=np.float32)
    with torch.inference_mode():
        want = [spec.module(torch.from_numpy(image)).numpy() for image in images]
    # `on`: the lane without its start-up gate, whose timing a machine busy with other tests can
    # sway (tests/unit/engine/test_wide.py checks the gate); what is measured here is the lane itself.
    command = inferpool_serve(
        "--model", "tests.support.compute_models:conv_stack", "--runtime.lend-idle-cores", "on",
        "--runtime.compile-cache-dir", str(tmp_path / "cache"),
    )  # fmt: skip
    with launch(command, ready_timeout=240) as server, httpx2.Client(base_url=server.url, timeout=60) as client:
        config = client.get("/v2/models/convstack/config").json()
        chosen = config["precision_selection"]
        assert chosen["configured"] == "auto", chosen
        assert chosen["reason"], chosen
        if native_bf16()[0]:
            # ~100 ms in fp32 on one core: long enough, and AMX or AVX-512 BF16 runs it several times faster.
            assert chosen["served"] == "bf16", chosen["reason"]
            assert config["backend"] == "openvino"
            assert chosen["gate"]["passed"]
            assert chosen["call_ms"]["fp32"] / chosen["call_ms"]["bf16"] >= 1.2
        else:
            assert chosen["served"] == "fp32", chosen
            assert "bf16 is not tried" in chosen["reason"], chosen
        assert config["wide_selection"]["enabled"], config["wide_selection"]
        headers = {"Content-Type": "application/json"}
        for image, expected in zip(images, want, strict=True):
            answer = client.post("/predict", content=orjson.dumps({"inputs": image.tolist()}), headers=headers)
            assert answer.status_code == 200, answer.text
            got = np.asarray(answer.json()["outputs"]["features"], dtype=np.float32)
            assert _cosine(got, expected) >= SYNTHETIC_MIN_COSINE, (_cosine(got, expected), chosen["reason"])
        metrics = client.get("/metrics").text
    # One request at a time: each ran alone in the pod, so on the lane (its answers checked above).
    lane_calls = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                     if line.startswith("inferpool_wide_lane_calls_total{"))  # fmt: skip
    assert lane_calls >= len(images), metrics
