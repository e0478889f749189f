"""Weights once (issue 22): onnxruntime serving does not keep a second resident copy of the weights."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import inferpool.engine.backends.autoselect as autoselect
import inferpool.engine.backends.onnxruntime.runtime as onnxruntime_backend
from inferpool.engine import InferenceModule, RuntimeOptions
from inferpool.engine.backends.eager import EagerRuntime
from inferpool.engine.backends.onnxruntime.export import WEIGHTS_SUFFIX, source_key
from inferpool.engine.backends.onnxruntime.runtime import OnnxRuntime, checked, load_session
from inferpool.engine.backends.weights import map_weights
from inferpool.engine.errors import ModelFailed
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.serving.served import ServedModel
from inferpool.engine.zoo.digits import build
from tests.support.backend_checks import mapped
from tests.support.extra_models import WIDE_WEIGHT_BYTES

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

ROOT = Path(__file__).resolve().parents[3]
PLAN = ThreadPlan(cpus=2, runtimes=1, intra_op_threads=1)


def fresh() -> InferenceModule:
    """A module of its own: these tests move its weights, which the shared fixture must not see."""
    return InferenceModule.from_spec(build())


def options(cache: Path, backend: str = "onnxruntime", **more) -> RuntimeOptions:
    return RuntimeOptions(backend=backend, compile_cache_dir=str(cache), warmup_iters=1, **more)


def check(outputs: dict[str, np.ndarray], images: np.ndarray, reference) -> None:
    probabilities, label = reference(images)
    np.testing.assert_allclose(outputs["probabilities"], probabilities, rtol=1e-3, atol=1e-5)
    np.testing.assert_array_equal(outputs["label"], label)


def test_the_export_keeps_its_weights_in_a_mapped_data_file(tmp_path):
    module = fresh()
    _, exported = load_session(module, options(tmp_path))
    assert isinstance(exported.model, Path)
    (data,) = tmp_path.glob(f"{exported.model.name}.*.data")
    assert data.stat().st_size > exported.model.stat().st_size  # the weights are not in the model file


def test_named_onnxruntime_moves_the_torch_weights_out_and_eager_still_answers(tmp_path, images, reference):
    module = fresh()
    served = ServedModel(module, options(tmp_path), PLAN, max_queue=8)
    try:
        assert mapped(module)
        known = checked(module)
        assert known is not None
        assert known.released
        check(served.call({"image": images}), images, reference)
        # The move is reversible: the module still computes (from the mapped file).
        check(EagerRuntime(module, options(tmp_path, "eager")).run({"image": images}), images, reference)
    finally:
        served.close()


def test_the_key_is_the_same_whether_weights_are_mapped_or_in_memory(tmp_path):
    module = fresh()
    key = source_key(module)
    assert map_weights(module.module, tmp_path / f"digits{WEIGHTS_SUFFIX}")
    assert mapped(module)
    assert source_key(module) == key  # read from the file, not faulted in
    with torch.no_grad():
        next(module.module.parameters())[0] += 1.0  # a private page now: hashed from memory
    changed = fresh()
    with torch.no_grad():
        next(changed.module.parameters())[0] += 1.0
    assert source_key(module) == source_key(changed) != key


def test_parity_is_still_checked_on_a_warm_start_that_moves_the_weights(tmp_path, caplog, images, reference):
    """The eager reference is taken before the weights move; a cached file that disagrees with it
    is exported again from the (mapped) weights."""
    import onnx.numpy_helper

    load_session(fresh(), options(tmp_path))
    (path,) = tmp_path.glob("digits-*.onnx")
    model = onnx.load(str(path))
    for weight in model.graph.initializer:
        if weight.data_type == onnx.TensorProto.FLOAT and weight.dims:
            shifted = onnx.numpy_helper.to_array(weight) + 0.1
            weight.CopyFrom(onnx.numpy_helper.from_array(shifted, weight.name))
    onnx.save(model, str(path))
    module = fresh()
    with caplog.at_level(logging.WARNING):
        session, rebuilt = load_session(module, options(tmp_path), release=True)
    assert "disagrees with the eager model" in caplog.text
    assert rebuilt.export_seconds is not None
    assert mapped(module)
    check(OnnxRuntime(module, options(tmp_path), session).run({"image": images}), images, reference)


def test_a_failed_runtime_is_replaced_after_the_weights_moved(tmp_path, images, reference):
    module = fresh()
    served = ServedModel(module, options(tmp_path), PLAN, max_queue=8)
    try:
        runtime = served.pool.runtimes[0]

        def broken(inputs):
            raise RuntimeError("boom")

        runtime.run = broken  # type: ignore[method-assign]
        with pytest.raises(ModelFailed):
            asyncio.run(served.infer(images[:2].tolist()))
        assert served.replaced_runtimes == 1
        assert served.pool.runtimes[0] is not runtime
        assert mapped(module)
        check(served.call({"image": images}), images, reference)
    finally:
        served.close()


def test_a_rebuilt_session_reads_neither_the_torch_weights_nor_eager(tmp_path, monkeypatch, images, reference):
    """What a forked process does for more intra-op threads: a session from the checked file."""
    module = fresh()
    first = OnnxRuntime.compile(module, options(tmp_path))

    def forbidden(*args, **kwargs):
        raise AssertionError("the rebuild read the torch weights or ran eager")

    monkeypatch.setattr(onnxruntime_backend, "ensure_export", forbidden)
    monkeypatch.setattr(onnxruntime_backend, "eager_outputs", forbidden)
    again = OnnxRuntime.compile(module, options(tmp_path, intra_op_threads=2))
    assert again is not first
    check(OnnxRuntime(module, options(tmp_path), again).run({"image": images}), images, reference)


def prefer(monkeypatch, winner: str) -> None:
    """auto's timings, rigged so that ``winner`` is fastest."""

    def timed(candidates, inputs, batching):
        return {name: {size: 1e-6 if name == winner else 1e-3 for size in inputs} for name in candidates}, set()

    monkeypatch.setattr(autoselect, "_time", timed)


def test_auto_choosing_eager_keeps_the_weights_in_memory(tmp_path, monkeypatch, images, reference):
    module = fresh()
    before = [p.untyped_storage().data_ptr() for p in module.module.parameters()]
    prefer(monkeypatch, "eager")
    choice = autoselect.resolve_backend(module, options(tmp_path, "auto", auto_backends=("eager", "onnxruntime")))
    assert choice.name == "eager"
    assert [p.untyped_storage().data_ptr() for p in module.module.parameters()] == before
    assert not mapped(module)
    known = checked(module)  # onnxruntime was tried and checked, and let nothing go
    assert known is not None
    assert not known.released
    check(EagerRuntime(module, options(tmp_path, "eager")).run({"image": images}), images, reference)


def test_auto_choosing_onnxruntime_moves_the_weights_out(tmp_path, monkeypatch, images, reference):
    module = fresh()
    prefer(monkeypatch, "onnxruntime")
    choice = autoselect.resolve_backend(module, options(tmp_path, "auto", auto_backends=("eager", "onnxruntime")))
    assert choice.name == "onnxruntime"
    assert mapped(module)
    check(OnnxRuntime(module, options(tmp_path), choice.compiled).run({"image": images}), images, reference)


PROBE = """
import json, sys
from pathlib import Path
from inferpool.engine import RuntimeOptions
from inferpool.engine.serving.served import ServedModel
# lend_idle_cores off: this measures the one session's weights; a wide lane is a documented second copy.
options = RuntimeOptions(backend=sys.argv[1], compile_cache_dir=sys.argv[2], num_runtimes=1, warmup_iters=1,
                         intra_op_threads=1, dispatch="inline", lend_idle_cores="off")
ServedModel.load("tests.support.extra_models:wide", options, start=False)
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
print(json.dumps({key: int(status[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}))
"""


def load_in_a_process(backend: str, cache: Path) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, backend, str(cache)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def test_onnxruntime_peak_rss_stays_near_eager_on_a_model_of_128_mb(tmp_path):
    """Wide: 128 MiB of weights. Kept twice (torch's and the session's), onnxruntime's peak and
    final RSS would exceed eager's by the whole 128 MiB plus the library; measured +44 MiB."""
    load_in_a_process("onnxruntime", tmp_path)  # the export, so that the next start is warm
    eager = load_in_a_process("eager", tmp_path)
    served = load_in_a_process("onnxruntime", tmp_path)
    margin = WIDE_WEIGHT_BYTES // 2
    assert served["VmHWM"] < eager["VmHWM"] + margin, (served, eager)
    assert served["VmRSS"] < eager["VmRSS"] + margin, (served, eager)
