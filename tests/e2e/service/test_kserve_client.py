"""The KServe Python SDK's v2 REST client, unmodified, against the real server.

The SDK pins its own FastAPI/httpx stack, so it lives in its own venv (`.venv-kserve`, made by
`make test`) and runs tests/e2e/service/kserve_client_check.py there; this test compares what it saw with
eager PyTorch.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

from inferpool.harness.server import REPO_ROOT, run_server, wait_ready

KSERVE_PYTHON = REPO_ROOT / ".venv-kserve" / "bin" / "python"
CHECK = Path(__file__).resolve().parent / "kserve_client_check.py"


def test_kserve_sdk_v2_client_json_and_binary(tmp_path, images, reference):
    assert KSERVE_PYTHON.exists(), "the KServe SDK venv is missing: `make test` creates .venv-kserve"
    batch = images[:4]
    np.save(tmp_path / "images.npy", batch)
    with run_server(tmp_path) as server:
        wait_ready(server)
        result = subprocess.run(
            [str(KSERVE_PYTHON), str(CHECK), server.url, str(tmp_path / "images.npy")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["live"] is True
    assert seen["ready"] is True
    assert seen["model_ready"] is True
    probabilities, labels = reference(batch)
    for encoding in ("json", "binary"):
        for size in (1, 4):
            got = seen[f"{encoding}-{size}"]
            assert got["id"] == f"k-{encoding == 'binary'}-{size}"
            assert got["label"] == labels[:size].tolist()
            np.testing.assert_allclose(got["probabilities"], probabilities[:size], rtol=1e-5, atol=1e-7)
    assert "400 Bad Request" in seen["error"]
    assert "input 'image' has shape [1, 64]" in seen["error"]
