"""ONNX files as a model source: the schema from the file's declared inputs, the backend that
serves them, and a repository version that holds one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from inferpool.config import Settings
from inferpool.engine import ConfigError, InferenceModule, ModelLoadError, RuntimeOptions
from inferpool.engine.models.sources import load_model, serving_options, source_kind
from inferpool.service.models.plans import repository_plans
from inferpool.service.models.repository import scan


def write_model(path: Path) -> Path:
    """ids (int64, [batch, seq]) -> doubled (int64, same shape); scale (float, [batch, 2]) -> same."""
    nodes = [helper.make_node("Add", ["ids", "ids"], ["doubled"]), helper.make_node("Identity", ["scale"], ["kept"])]
    graph = helper.make_graph(
        nodes, "two",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("doubled", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["batch", 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def test_an_onnx_file_becomes_a_module_with_its_declared_schema(tmp_path):
    source = str(write_model(tmp_path / "two.onnx"))
    assert source_kind(source) == "onnx"
    module = InferenceModule.from_spec(load_model(source))
    assert module.name == "two"
    assert [(s.name, s.dtype, s.shape) for s in module.schema.inputs] == [
        ("ids", "int64", (None, None)),
        ("scale", "float32", (None, 2)),
    ]
    assert [s.name for s in module.schema.outputs] == ["doubled", "kept"]
    doubled, kept = module.module(torch.tensor([[1, 2, 3]]), torch.ones(1, 2))
    assert doubled.tolist() == [[2, 4, 6]]
    np.testing.assert_array_equal(kept.numpy(), np.ones((1, 2), np.float32))
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "missing.onnx"))
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="onnxruntime cannot load the ONNX model"):
        load_model(str(tmp_path / "broken.onnx"))


def test_only_onnxruntime_or_openvino_serves_an_onnx_file():
    assert serving_options("m.onnx", RuntimeOptions()).backend == "onnxruntime"  # in place of auto
    assert serving_options("m.onnx", RuntimeOptions(backend="openvino")).backend == "openvino"
    assert serving_options("m.pt2", RuntimeOptions()).backend == "auto"
    refused = r"'m\.onnx' is served by backend 'onnxruntime' or 'openvino' only, not 'eager'"
    with pytest.raises(ConfigError, match=refused):
        serving_options("m.onnx", RuntimeOptions(backend="eager"))


def test_a_repository_version_holding_model_onnx(tmp_path):
    write_model(tmp_path / "two" / "1" / "model.onnx")
    write_model(tmp_path / "two" / "2" / "model.onnx")
    (tmp_path / "two" / "2" / "config.toml").write_text('[runtime]\nbackend = "eager"\n')
    (tmp_path / "two" / "config.toml").write_text("version_policy = {specific = [1]}")
    folder = scan(tmp_path)["two"]
    assert folder.versions[1].source.endswith("two/1/model.onnx")
    assert "served by backend 'onnxruntime' or 'openvino' only, not 'eager'" in (folder.versions[2].reason or "")
    [plan] = repository_plans(Settings(runtime=RuntimeOptions(backend="eager")), {"two": folder})
    assert plan.options.backend == "onnxruntime"  # the server's default backend is for torch models
