"""int8 in a real server with two serving processes: both serve the same quantization, the one
the start-up race chose, and answer with eager's labels on held-out digits."""

from __future__ import annotations

from importlib.util import find_spec

import httpx2
import numpy as np
import pytest

from inferpool.engine.zoo.digits import held_out_inputs
from inferpool.harness.server import run_server, wait_ready

pytest.importorskip("onnxruntime.quantization")


@pytest.mark.parametrize(
    "backend",
    ["onnxruntime", pytest.param("openvino", marks=pytest.mark.skipif(find_spec("openvino") is None, reason="extra"))],
)
def test_every_serving_process_serves_the_same_int8_with_eagers_labels(tmp_path, reference, backend):
    args = (
        "--workers", "2", "--runtime.backend", backend, "--runtime.precision", "int8",
        "--runtime.int8-methods", '["dynamic", "static"]', "--runtime.compile-cache-dir", str(tmp_path / "cache"),
    )  # fmt: skip
    images = np.concatenate([batch["image"] for batch in held_out_inputs()[:64]])
    with run_server(tmp_path, *args, ready_timeout=120) as server:
        wait_ready(server, timeout=120)
        selections, answers = [], []
        for start in range(0, 64, 8):  # a new connection each, so that both processes are likely asked
            with httpx2.Client(base_url=server.url, timeout=30) as client:
                selections.append(client.get("/v2/models/digits/config").json()["precision_selection"])
                answers.append(client.post("/predict", json={"inputs": images[start : start + 8].tolist()}))
    assert {s["served"] for s in selections} == {"int8"}
    assert len({s["method"] for s in selections}) == 1, selections
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    labels = np.concatenate([a.json()["outputs"]["label"] for a in answers])
    _, want = reference(images)
    assert np.mean(labels == want) >= 0.98  # the gate passed at 99 % on 270 of these images' siblings
