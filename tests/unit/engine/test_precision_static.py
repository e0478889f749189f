"""Static int8 (QDQ, calibrated) for convolutions: served only within the gate; user JSONL inputs."""

from __future__ import annotations

import json
import logging
from importlib.util import find_spec

import numpy as np
import onnx
import pytest
import torch

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions
from inferpool.engine.backends.precision import precision_choice
from inferpool.engine.models.spec import ModelSpec
from tests.unit.engine.test_precision import assert_a_warm_start_reuses_the_cache, cosines, eager, run

pytest.importorskip("onnxruntime.quantization")
OPENVINO = pytest.mark.skipif(find_spec("openvino") is None, reason="openvino is an optional extra")
BACKEND_NAMES = ["onnxruntime", pytest.param("openvino", marks=OPENVINO)]
STATIC = ("static",)


def tiny_cnn() -> ModelSpec:
    """Two convolutions and a projection: a [B, 3, 16, 16] image to a 32-wide feature vector."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 32),
    )  # fmt: skip
    return ModelSpec(model.eval(), {"image": torch.zeros(1, 3, 16, 16)}, ("features",), name="tinycnn")


@pytest.fixture(scope="module")
def cnn():
    return InferenceModule.from_spec(tiny_cnn())


def options(backend: str, cache, **more) -> RuntimeOptions:
    return RuntimeOptions(backend=backend, precision="int8", compile_cache_dir=str(cache), warmup_iters=1, **more)


UNSEEN = np.random.default_rng(11).standard_normal((16, 3, 16, 16)).astype(np.float32)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_static_quantization_that_passes_is_served_int8_within_the_gate(cnn, tmp_path, backend):
    got = run(backend, cnn, options(backend, tmp_path, int8_methods=STATIC), UNSEEN)
    choice = precision_choice(cnn)
    assert choice is not None
    assert (choice.served, choice.report()["method"]) == ("int8", "static")
    assert choice.gate is not None
    assert choice.gate.passed
    (quantized,) = tmp_path.glob("tinycnn-*.int8.onnx")
    ops = [node.op_type for node in onnx.load(str(quantized)).graph.node]
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= set(ops)
    assert ops.count("DequantizeLinear") >= 4  # both convolutions' weights and inputs, at least
    want = eager(cnn, UNSEEN)
    assert not np.allclose(got, want, rtol=1e-3, atol=1e-5)  # really int8, not fp32
    assert cosines(got, want).min() >= 0.99  # within the gate on inputs it never saw


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_a_static_quantization_that_fails_is_served_fp32_with_one_warning(cnn, tmp_path, backend, caplog):
    opts = options(backend, tmp_path, int8_methods=STATIC, accuracy_min_cosine=1.0)  # no int8 meets 1.0
    with caplog.at_level(logging.WARNING, logger="inferpool"):
        got = run(backend, cnn, opts, UNSEEN)
    choice = precision_choice(cnn)
    assert choice is not None
    assert choice.served == "fp32"
    assert choice.gate is not None
    assert choice.gate.figures.min_cosine is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    (warning,) = warnings
    assert warning.startswith(f"model 'tinycnn': int8 fails the accuracy gate: static: min cosine "
                              f"{choice.gate.figures.min_cosine:.4f} (needs 1.0)")  # fmt: skip
    assert warning.endswith("; serving fp32")
    assert "\n" not in warning
    np.testing.assert_allclose(got, eager(cnn, UNSEEN), rtol=1e-3, atol=1e-4)


def test_strict_refuses_a_static_quantization_that_fails(cnn, tmp_path):
    opts = options("onnxruntime", tmp_path, int8_methods=STATIC, accuracy_min_cosine=1.0, precision_strict=True)
    with pytest.raises(ModelLoadError, match=r"int8 fails the accuracy gate: static: min cosine 0\.\d+ .*strict"):
        BACKENDS["onnxruntime"].compile(cnn, opts)


def race(monkeypatch, call_ms: dict[str, float]) -> None:
    """The start-up timing of each candidate, fixed: which is served must follow it."""
    order = iter(call_ms.values())
    monkeypatch.setattr("inferpool.engine.backends.precision._call_ms", lambda run, artifact, inputs: next(order))


def test_every_quantizer_is_gated_and_the_fastest_that_passes_is_served(cnn, tmp_path, monkeypatch):
    race(monkeypatch, {"dynamic": 2.0, "static": 1.0, "fp32": 3.0})
    BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path))
    choice = precision_choice(cnn)
    assert choice is not None
    shown = choice.report()
    assert [g["method"] for g in shown["candidates"]] == ["dynamic", "static"]
    assert all(g["passed"] for g in shown["candidates"])
    assert shown["call_ms"] == {"dynamic": 2.0, "static": 1.0, "fp32": 3.0}
    assert (shown["served"], shown["method"]) == ("int8", "static")


def test_a_rebuild_in_the_same_process_keeps_the_race_it_ran(cnn, tmp_path, monkeypatch):
    """A compile for another thread plan, or in a forked serving process, must serve what the
    first served, whatever a second timing would say: every process answers alike."""
    race(monkeypatch, {"dynamic": 2.0, "static": 1.0, "fp32": 3.0})
    BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path))
    race(monkeypatch, {"dynamic": 1.0, "static": 2.0, "fp32": 3.0})
    BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path, intra_op_threads=2))
    choice = precision_choice(cnn)
    assert choice is not None
    assert choice.report()["method"] == "static"
    race(monkeypatch, {"dynamic": 1.0, "static": 2.0, "fp32": 3.0})
    BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path, accuracy_min_agreement=0.5))
    choice = precision_choice(cnn)
    assert choice is not None
    assert choice.report()["method"] == "dynamic"  # other options: raced again


def test_int8_that_passes_but_measures_slower_than_fp32_is_not_served(cnn, tmp_path, monkeypatch, caplog):
    race(monkeypatch, {"dynamic": 2.0, "static": 3.0, "fp32": 1.0})
    with caplog.at_level(logging.WARNING, logger="inferpool"):
        got = run("onnxruntime", cnn, options("onnxruntime", tmp_path), UNSEEN)
    choice = precision_choice(cnn)
    assert choice is not None
    assert choice.served == "fp32"
    assert "int8 passes the accuracy gate but measures slower than fp32 (example call: dynamic 2 ms" in caplog.text
    np.testing.assert_allclose(got, eager(cnn, UNSEEN), rtol=1e-3, atol=1e-4)


def test_strict_serves_the_fastest_int8_without_racing_fp32(cnn, tmp_path, monkeypatch):
    race(monkeypatch, {"dynamic": 2.0, "static": 3.0})
    BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path, precision_strict=True))
    choice = precision_choice(cnn)
    assert choice is not None
    assert (choice.served, choice.report()["method"], set(choice.call_ms)) == ("int8", "dynamic", {"dynamic", "static"})


def test_a_warm_start_neither_calibrates_nor_measures(cnn, tmp_path, monkeypatch):
    opts = options("onnxruntime", tmp_path, int8_methods=STATIC)
    BACKENDS["onnxruntime"].compile(cnn, opts)
    assert_a_warm_start_reuses_the_cache(cnn, opts, "quantize_static", monkeypatch)


def test_the_digits_cnn_keeps_its_labels_in_static_int8(digits_module, tmp_path):
    """Real trained weights and 270 of its own held-out test images: top-1 agreement means something."""
    BACKENDS["onnxruntime"].compile(digits_module, options("onnxruntime", tmp_path, int8_methods=STATIC))
    choice = precision_choice(digits_module)
    assert choice is not None
    assert choice.served == "int8"
    assert choice.gate is not None
    figures = choice.gate.figures
    assert figures.items == 270  # 360 images, every 4th calibrating
    assert figures.min_cosine is None  # probabilities and labels: judged by agreement
    assert figures.agreement is not None
    assert figures.agreement >= 0.99
    assert figures.max_prob_diff is not None
    assert 0 < figures.max_prob_diff < 0.5
    assert "top-1 agreement" in choice.gate.describe()
    assert "max |Δp|" in choice.gate.describe()


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_a_user_jsonl_is_the_gates_inputs(cnn, tmp_path):
    rng = np.random.default_rng(5)
    lines = [{"image": rng.standard_normal((3, 16, 16)).round(3).tolist()} for _ in range(11)]
    lines.append({"image": rng.standard_normal((2, 3, 16, 16)).round(3).tolist()})  # a batch on one line
    inputs = write_jsonl(tmp_path / "held.jsonl", lines)
    BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path, int8_methods=STATIC, accuracy_inputs=inputs))
    choice = precision_choice(cnn)
    assert choice is not None
    assert choice.gate is not None
    assert choice.gate.inputs == f"{inputs} (9 gated, 3 calibrating)"
    assert choice.gate.figures.items == 10  # 9 lines, the last (line 12) of two images


def test_a_user_jsonl_with_other_input_names_says_what_to_write(cnn, tmp_path):
    inputs = write_jsonl(tmp_path / "held.jsonl", [{"pixels": [[[0.0] * 16] * 16] * 3}])
    with pytest.raises(ModelLoadError, match=r"line 1 of accuracy_inputs .* has inputs \['pixels'\]; .*'image'"):
        BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path, accuracy_inputs=inputs))


def test_a_user_jsonl_with_a_wrong_shape_names_the_line(cnn, tmp_path):
    inputs = write_jsonl(tmp_path / "held.jsonl", [{"image": [[[0.0] * 16] * 16] * 3}, {"image": [1.0, 2.0]}])
    with pytest.raises(ModelLoadError, match=r"line 2 of accuracy_inputs .*: input 'image' has shape \[2\]"):
        BACKENDS["onnxruntime"].compile(cnn, options("onnxruntime", tmp_path, accuracy_inputs=inputs))


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (None, "missing.jsonl", "does not exist or is not a file"),
        ("", "held.csv", "name a .jsonl file"),
        ('{"image": [1]}\nnot json\n', "held.jsonl", "line 2 of .* is not JSON"),
        ("[1, 2]\n", "held.jsonl", "line 1 of .* is not a JSON object of inputs"),
        ("\n", "held.jsonl", "holds no lines"),
    ],
)
def test_accuracy_inputs_are_checked_at_start_up_with_how_to_fix(tmp_path, content, name, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=f"accuracy_inputs=.* is invalid: .*{message}"):
        RuntimeOptions(backend="onnxruntime", precision="int8", accuracy_inputs=str(path))


def test_unknown_int8_methods_are_refused():
    with pytest.raises(ValueError, match=r"int8_methods=\('qat',\) is invalid: use names from \['dynamic', 'static'\]"):
        RuntimeOptions(backend="onnxruntime", precision="int8", int8_methods=("qat",))
