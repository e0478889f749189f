"""A repository version holding an ONNX model, served in-process by the onnxruntime backend:
the same numbers as the eager PyTorch model it was exported from, within tolerance."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.integration.service.conftest import app_client


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    """Model 'mlp', version 1: ``model.onnx`` exported here (no download), and its eager model."""
    model = Mlp().eval()
    folder = tmp_path / "repository" / "mlp" / "1"
    folder.mkdir(parents=True)
    batch = torch.export.Dim("batch", max=1024)
    with warnings.catch_warnings():  # the exporter's own deprecation chatter
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.randn(2, 4),), folder / "model.onnx", input_names=["x"], output_names=["y"],
            dynamic_shapes=({0: batch},), dynamo=True, verbose=False,
        )  # fmt: skip
    return tmp_path / "repository", model


def test_an_onnx_version_answers_as_eager_pytorch(repository):
    root, model = repository
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    with torch.inference_mode():
        expected = model(torch.from_numpy(x)).numpy()
    with app_client("--model-repository", str(root), "--runtime.backend", "eager") as client:
        config = client.get("/v2/models/mlp/versions/1/config").json()
        assert config["backend"] == "onnxruntime"  # the server's default backend is for its torch models
        answer = client.post("/predict/mlp", json={"inputs": x.tolist()})
        assert answer.status_code == 200, answer.text
        body = {"inputs": [{"name": "x", "shape": [5, 4], "datatype": "FP32", "data": x.ravel().tolist()}]}
        v2 = client.post("/v2/models/mlp/versions/1/infer", json=body).json()
        metadata = client.get("/v2/models/mlp").json()
    np.testing.assert_allclose(np.asarray(answer.json()["outputs"]["y"]), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(v2["outputs"][0]["data"]).reshape(5, 3), expected, rtol=1e-5, atol=1e-6)
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert metadata["versions"] == ["1"]
