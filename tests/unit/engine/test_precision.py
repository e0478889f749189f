"""runtime.precision = "int8": served only when the accuracy gate passes, on both ONNX backends."""

from __future__ import annotations

import logging
from importlib.util import find_spec

import numpy as np
import onnx
import pytest
import torch

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions, ServedModel
from inferpool.engine.backends import precision
from inferpool.engine.backends.precision import measure, precision_choice
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.plan.threads import ThreadPlan

pytest.importorskip("onnxruntime.quantization")
OPENVINO = pytest.mark.skipif(find_spec("openvino") is None, reason="openvino is an optional extra")
BACKEND_NAMES = ["onnxruntime", pytest.param("openvino", marks=OPENVINO)]


def spec(name: str, outlier: float | None) -> ModelSpec:
    """A MatMul-heavy MLP. ``outlier``: one weight that large, so per-tensor int8 rounds every
    other weight of that layer to zero (the model int8 is bad for)."""
    torch.manual_seed(0)
    first = torch.nn.Linear(64, 128)
    model = torch.nn.Sequential(first, torch.nn.ReLU(), torch.nn.Linear(128, 16))
    if outlier is not None:
        with torch.no_grad():
            first.weight[0, 0] = outlier
    return ModelSpec(model.eval(), {"x": torch.zeros(1, 64)}, ("y",), name=name)


@pytest.fixture(scope="module")
def good():
    return InferenceModule.from_spec(spec("good", None))


@pytest.fixture(scope="module")
def bad():
    return InferenceModule.from_spec(spec("bad", 1000.0))


def int8(backend: str, cache, **more) -> RuntimeOptions:
    """int8 by ``dynamic`` (named: served when it passes, not raced against fp32's speed)."""
    more.setdefault("int8_methods", ("dynamic",))
    return RuntimeOptions(backend=backend, precision="int8", compile_cache_dir=str(cache), warmup_iters=1, **more)


def run(backend: str, module: InferenceModule, options: RuntimeOptions, inputs: np.ndarray) -> np.ndarray:
    """The model's one output for ``inputs`` as its one input, on ``backend`` as ``options`` build it."""
    runtime = BACKENDS[backend](module, options, BACKENDS[backend].compile(module, options))
    return runtime.run({module.schema.inputs[0].name: inputs})[module.schema.outputs[0].name]


def eager(module: InferenceModule, inputs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return module.module(torch.from_numpy(inputs)).numpy()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


HELD_OUT = np.random.default_rng(7).standard_normal((32, 64)).astype(np.float32)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_model_that_passes_the_gate_is_served_int8_within_it(good, tmp_path, backend):
    options = int8(backend, tmp_path)
    got = run(backend, good, options, HELD_OUT)
    choice = precision_choice(good)
    assert choice is not None
    assert (choice.configured, choice.served) == ("int8", "int8")
    assert choice.gate is not None
    assert choice.gate.passed
    assert (choice.gate.figures.min_cosine or 0.0) >= 0.99
    want = eager(good, HELD_OUT)
    assert not np.allclose(got, want, rtol=1e-3, atol=1e-5)  # really the quantized model, not fp32
    assert cosines(got, want).min() >= 0.99  # and within the gate on inputs it never saw


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_model_that_fails_the_gate_is_served_fp32_with_a_warning_naming_the_figure(bad, tmp_path, backend, caplog):
    options = int8(backend, tmp_path)
    with caplog.at_level(logging.WARNING):
        got = run(backend, bad, options, HELD_OUT)
    choice = precision_choice(bad)
    assert choice is not None
    assert choice.served == "fp32"
    assert choice.gate is not None
    figure = choice.gate.figures.min_cosine
    assert figure is not None
    assert figure < 0.99
    assert f"model 'bad': int8 fails the accuracy gate: dynamic: min cosine {figure:.4f} (needs 0.99)" in caplog.text
    assert "serving fp32" in caplog.text
    np.testing.assert_allclose(got, eager(bad, HELD_OUT), rtol=1e-3, atol=1e-4)  # fp32: eager's answers


def test_strict_refuses_to_start_naming_the_figure(bad, tmp_path):
    with pytest.raises(
        ModelLoadError, match=r"int8 fails the accuracy gate: dynamic: min cosine -?\d\.\d+ .*precision_strict"
    ):
        BACKENDS["onnxruntime"].compile(bad, int8("onnxruntime", tmp_path, precision_strict=True))


def test_the_threshold_is_configurable(bad, tmp_path):
    options = int8("onnxruntime", tmp_path, accuracy_min_cosine=-1.0)
    BACKENDS["onnxruntime"].compile(bad, options)
    choice = precision_choice(bad)
    assert choice is not None
    assert choice.served == "int8"


def test_the_quantized_file_and_figures_are_cached_beside_the_export(good, tmp_path, monkeypatch):
    options = int8("onnxruntime", tmp_path)
    BACKENDS["onnxruntime"].compile(good, options)
    (export,) = [p for p in tmp_path.glob("good-*.onnx") if not p.name.endswith(".int8.onnx")]
    (quantized,) = tmp_path.glob("good-*.int8.onnx")
    assert quantized.name != export.name.replace(".onnx", ".int8.onnx")  # its own key, precision in it
    assert (tmp_path / quantized.name.replace(".int8.onnx", ".gate.json")).is_file()
    ops = {node.op_type for node in onnx.load(str(quantized)).graph.node}
    assert "MatMulInteger" in ops

    assert_a_warm_start_reuses_the_cache(good, options, "quantize_dynamic", monkeypatch)


def assert_a_warm_start_reuses_the_cache(module, options, quantizer: str, monkeypatch) -> None:
    """Compiled again with ``options``: served int8 without quantizing or measuring again."""

    def never(*args, **kwargs):
        raise AssertionError("a warm start quantized or measured again")

    monkeypatch.setattr(precision, "measure", never)  # the name serve_precision calls
    monkeypatch.setattr(f"onnxruntime.quantization.{quantizer}", never)
    BACKENDS["onnxruntime"].compile(module, options)
    choice = precision_choice(module)
    assert choice is not None
    assert choice.served == "int8"


def test_fp32_writes_no_int8_file(good, tmp_path):
    BACKENDS["onnxruntime"].compile(good, RuntimeOptions(backend="onnxruntime", compile_cache_dir=str(tmp_path)))
    assert not list(tmp_path.glob("*.int8.onnx"))


def test_dynamic_int8_leaves_convolutions_fp32(digits_module, tmp_path):
    options = int8("onnxruntime", tmp_path, accuracy_min_cosine=-1.0, int8_methods=("dynamic",))
    BACKENDS["onnxruntime"].compile(digits_module, options)
    (quantized,) = tmp_path.glob("digits-*.int8.onnx")
    ops = {node.op_type for node in onnx.load(str(quantized)).graph.node}
    assert "Conv" in ops
    assert "ConvInteger" not in ops


def test_the_config_shows_the_gate(good, tmp_path):
    options = int8("onnxruntime", tmp_path)
    model = ServedModel(good, options, ThreadPlan(cpus=1, runtimes=1, intra_op_threads=1), max_queue=4)
    try:
        shown = model.info.precision_selection
    finally:
        model.close()
    assert shown is not None
    assert shown["served"] == "int8"
    assert shown["gate"]["passed"]
    assert shown["gate"]["figures"]["min_cosine"] >= 0.99


def test_int8_needs_a_named_onnx_backend():
    with pytest.raises(ValueError, match="int8 needs backend 'onnxruntime' or 'openvino', named"):
        RuntimeOptions(precision="int8")
    with pytest.raises(ValueError, match="precision='bf16' is invalid"):
        RuntimeOptions(backend="onnxruntime", precision="bf16")


def test_gate_figures_per_item():
    want = [[np.array([[2.0, 0.0], [0.0, 1.0]], np.float32), np.array([1, 2])]]  # not probabilities: row 0
    got = [[np.array([[2.0, 0.0], [1.0, 1.0]], np.float32), np.array([1, 3])]]
    figures = measure(want, got, batched=True)
    assert figures.items == 2
    assert figures.min_cosine == pytest.approx(np.sqrt(0.5))
    assert figures.mean_cosine == pytest.approx((1 + np.sqrt(0.5)) / 2)
    assert figures.max_abs_diff == 1.0
    assert figures.agreement == 0.5
    assert figures.max_prob_diff is None


def test_one_number_per_item_is_judged_by_the_calls_column_not_its_sign():
    want = [[np.array([3.0, -1.0, 0.5, -2.0], np.float32)], [np.array([1.0], np.float32)]]
    got = [[np.array([3.5, -0.2, 1.2, -1.0], np.float32)], [np.array([0.5], np.float32)]]
    figures = measure(want, got, batched=True)
    a, b = want[0][0], got[0][0]
    assert figures.min_cosine == pytest.approx(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    assert figures.min_cosine is not None
    assert figures.min_cosine < 0.95  # each score kept its sign: a per-item cosine would be 1
    assert figures.items == 2  # the 4-score call, and the 1-score call (by its sign)


def test_probabilities_are_judged_by_top1_agreement_not_cosine():
    want = [[np.array([[0.6, 0.4], [0.1, 0.9], [0.5, 0.5]], np.float32)]]
    got = [[np.array([[0.4, 0.6], [0.12, 0.88], [0.5, 0.5]], np.float32)]]
    figures = measure(want, got, batched=True)
    assert figures.min_cosine is None
    assert figures.agreement == pytest.approx(2 / 3)
    assert figures.max_prob_diff == pytest.approx(0.2)


def test_a_corrupt_cached_int8_file_is_quantized_again(good, tmp_path, caplog):
    options = int8("onnxruntime", tmp_path)
    BACKENDS["onnxruntime"].compile(good, options)
    (quantized,) = tmp_path.glob("good-*.int8.onnx")
    whole = quantized.read_bytes()
    quantized.write_bytes(whole[: len(whole) // 2])
    with caplog.at_level(logging.WARNING):
        BACKENDS["onnxruntime"].compile(good, options)
    assert f"the cached int8 file {quantized} is unusable" in caplog.text
    choice = precision_choice(good)
    assert choice is not None
    assert choice.served == "int8"
    assert quantized.stat().st_size == len(whole)
