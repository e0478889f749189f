"""runtime.precision = "bf16" on openvino: the export compiled in bfloat16, served only when it
passes the accuracy gate against fp32 and measures faster (or precision_strict asks for it)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions
from inferpool.engine.backends import openvino as openvino_backend
from inferpool.engine.backends.precision import precision_choice
from inferpool.engine.models.spec import ModelSpec

openvino = pytest.importorskip("openvino", reason="openvino is an optional extra")
BF16_CPU = "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
RUNS_BF16 = pytest.mark.skipif(not BF16_CPU, reason="this CPU has no bf16 instructions: openvino runs fp32")
HELD_OUT = np.random.default_rng(3).standard_normal((16, 256)).astype(np.float32)


def mlp(name: str) -> InferenceModule:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64))
    return InferenceModule.from_spec(ModelSpec(model.eval(), {"x": torch.zeros(1, 256)}, ("y",), name=name))


def bf16(cache: object, **more: Any) -> RuntimeOptions:
    return RuntimeOptions(backend="openvino", precision="bf16", compile_cache_dir=str(cache), warmup_iters=1, **more)


def run(module: InferenceModule, options: RuntimeOptions) -> np.ndarray:
    backend = BACKENDS["openvino"]
    return backend(module, options, backend.compile(module, options)).run({"x": HELD_OUT})["y"]


def eager(module: InferenceModule) -> np.ndarray:
    with torch.inference_mode():
        return module.module(torch.from_numpy(HELD_OUT)).numpy()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_bf16_within_the_gate_is_served_when_it_measures_faster(tmp_path) -> None:
    module = mlp("bf16_passes")
    got = run(module, bf16(tmp_path))
    choice = precision_choice(module)
    assert choice is not None
    assert choice.gate is not None
    assert choice.configured == "bf16"
    assert choice.gate.passed
    assert choice.gate.method == "bf16"
    assert (choice.gate.figures.min_cosine or 0.0) >= 0.99
    assert set(choice.call_ms) == {"bf16", "fp32"}
    faster = "bf16" if choice.call_ms["bf16"] < choice.call_ms["fp32"] else "fp32"
    assert choice.served == faster  # the race's verdict, whichever this CPU gives
    assert cosines(got, eager(module)).min() >= 0.99
    assert choice.report()["method"] == ("bf16" if faster == "bf16" else None)


def test_strict_serves_bf16_that_passes_whatever_the_race_says(tmp_path) -> None:
    module = mlp("bf16_strict")
    run(module, bf16(tmp_path, precision_strict=True))
    choice = precision_choice(module)
    assert choice is not None
    assert choice.served == "bf16"


def test_a_rebuild_in_the_same_tree_reuses_the_verdict(tmp_path) -> None:
    module, options = mlp("bf16_rebuilt"), bf16(tmp_path)
    run(module, options)
    first = precision_choice(module)
    run(module, options)  # as a forked serving process's rebuild for its thread plan
    assert precision_choice(module) is first


@RUNS_BF16
def test_bf16_that_fails_the_gate_is_served_fp32_with_the_figures_or_refused(tmp_path, caplog) -> None:
    module = mlp("bf16_fails")
    with caplog.at_level(logging.WARNING, logger="inferpool.engine.backends.precision"):
        got = run(module, bf16(tmp_path, accuracy_min_cosine=1.0))  # bf16 rounds: no item is exactly fp32's
    choice = precision_choice(module)
    assert choice is not None
    assert choice.gate is not None
    assert (choice.configured, choice.served, choice.gate.passed) == ("bf16", "fp32", False)
    assert "bf16 fails the accuracy gate: bf16: min cosine" in caplog.text
    assert "serving fp32" in caplog.text
    np.testing.assert_allclose(got, eager(module), rtol=1e-3, atol=1e-5)  # fp32's answers
    with pytest.raises(ModelLoadError, match="precision_strict refuses to serve it"):
        run(mlp("bf16_refused"), bf16(tmp_path, accuracy_min_cosine=1.0, precision_strict=True))


def test_bf16_needs_the_openvino_backend() -> None:
    with pytest.raises(ValueError, match="bf16 needs 'openvino'"):
        RuntimeOptions(backend="onnxruntime", precision="bf16")


def counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The precision of every model the openvino backend compiles from here on."""
    compiled: list[str] = []
    real = openvino_backend.compile_file

    def spy(*args: Any, **kwargs: Any) -> Any:
        compiled.append(kwargs.get("precision", args[5] if len(args) > 5 else "fp32"))
        return real(*args, **kwargs)

    monkeypatch.setattr(openvino_backend, "compile_file", spy)
    return compiled


def test_a_known_bf16_verdict_compiles_only_bf16(tmp_path, monkeypatch) -> None:
    module, options = mlp("bf16_known"), bf16(tmp_path, precision_strict=True)
    compiled = counting_compiles(monkeypatch)
    first_answer = run(module, options)
    assert compiled == ["fp32", "bf16"]  # no verdict yet: fp32 for the parity check and the gate
    compiled.clear()
    again = run(module, options)  # a rebuild for the plan, as a forked serving process's
    assert compiled == ["bf16"]
    assert precision_choice(module).served == "bf16"  # type: ignore[union-attr]
    np.testing.assert_array_equal(again, first_answer)


@RUNS_BF16
def test_a_known_fp32_verdict_compiles_only_fp32(tmp_path, monkeypatch) -> None:
    module, options = mlp("bf16_known_fp32"), bf16(tmp_path, accuracy_min_cosine=1.0)
    run(module, options)  # bf16 fails a gate of cosine 1.0 (or this CPU runs fp32): fp32 with a warning
    assert precision_choice(module).served == "fp32"  # type: ignore[union-attr]
    compiled = counting_compiles(monkeypatch)
    run(module, options)
    assert compiled == ["fp32"]


def test_a_verdict_for_other_options_is_not_reused(tmp_path, monkeypatch) -> None:
    module = mlp("bf16_other_options")
    run(module, bf16(tmp_path, precision_strict=True))
    compiled = counting_compiles(monkeypatch)
    run(module, bf16(tmp_path, precision_strict=True, accuracy_min_cosine=0.5))  # another gate: decided afresh
    assert compiled == ["fp32", "bf16"]


@pytest.mark.parametrize("batch", [None, 8], ids=["as raced", "batch resolved after the race"])
def test_the_wide_artifact_is_one_stream_of_every_thread_in_the_served_precision(
    tmp_path, monkeypatch, batch: int | None
) -> None:
    module, options = mlp(f"bf16_wide_{batch}"), bf16(tmp_path, precision_strict=True)
    run(module, options)
    compiled = counting_compiles(monkeypatch)
    # max_batch_size = 0 is resolved after the race (inferpool.engine.plan.auto_batch): the lane
    # built with the resolved options must still be built in the precision the race chose.
    served = options if batch is None else replace(options, max_batch_size=batch)
    wide = BACKENDS["openvino"].wide_artifact(module, served, 2)
    assert compiled == ["bf16"]
    assert (wide.streams, wide.threads_per_stream) == (1, 2)
    assert wide.model.get_property("INFERENCE_NUM_THREADS") == 2
