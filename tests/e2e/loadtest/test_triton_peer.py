"""loadtest.compare's Triton row for real: Triton Inference Server 2.51 from its own venv
(``make .venv-triton``) serves InferPool's ONNX export of the digits CNN, answers InferPool's v2
JSON body with eager PyTorch's numbers, and stops with its whole tree (tritonserver, the
backend's stubs)."""

from __future__ import annotations

import os
import time

import httpx2
import numpy as np

from inferpool.harness.payloads import DIGIT, PAYLOADS
from inferpool.harness.server import launch
from loadtest.compare_triton import TRITON_PYTHON, triton_variant
from loadtest.procs import tree


def test_triton_answers_the_v2_json_body_as_eager_pytorch_does(tmp_path, reference):
    assert TRITON_PYTHON.exists(), "Triton's venv is missing: `make test` (or `make .venv-triton`) creates it"
    variant = triton_variant(str(TRITON_PYTHON))
    payload = PAYLOADS[variant.payload]()
    with launch(variant.argv, tmp_path, name=variant.name, ready_path=variant.ready_path, ready_timeout=120) as server:
        members = tree(server.process.pid)
        answer = httpx2.post(server.url + payload.path, content=payload.body, headers=dict(payload.headers))
    assert answer.status_code == 200, answer.text
    outputs = {output["name"]: output for output in answer.json()["outputs"]}
    probabilities, label = reference(DIGIT[None])
    assert outputs["probabilities"]["shape"] == [1, 10]
    np.testing.assert_allclose(outputs["probabilities"]["data"], probabilities.reshape(-1), rtol=1e-4, atol=1e-5)
    assert outputs["label"]["data"] == label.tolist()
    assert len(members) == 3, members  # tritonserver (the peer became it) and a stub per instance
    deadline = time.monotonic() + 10  # the launcher killed the group; its members may still be exiting
    while left := [pid for pid in members if os.path.exists(f"/proc/{pid}")]:
        assert time.monotonic() < deadline, f"Triton's tree outlived the launcher: {left}"
        time.sleep(0.1)
