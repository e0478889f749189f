from __future__ import annotations

import asyncio
import importlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions, ServedModel, load_model
from engine.backends.onnxruntime import OnnxRuntime
from engine.threads import ThreadPlan

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# ORT's kernels (and their blocking per batch size) differ from PyTorch's: equal to float
# rounding, not bitwise.
RTOL, ATOL = 1e-4, 1e-6


@pytest.fixture(scope="module")
def session(digits_module):
    """One export + session for the whole module: the export is the slow part (~2 s)."""
    return OnnxRuntime.compile(digits_module, RuntimeOptions(intra_op_threads=1))


def check(got, images, reference):
    probabilities, label = reference(images)
    np.testing.assert_allclose(got["probabilities"], probabilities, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got["label"], label)
    assert got["probabilities"].dtype == np.float32
    assert got["label"].dtype == np.int64


def test_registered_by_name():
    assert BACKENDS["onnxruntime"] is OnnxRuntime


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_matches_eager_reference_at_any_batch_size(digits_module, options, session, images, reference, batch):
    runtime = OnnxRuntime(digits_module, options, session)
    batch_images = np.ascontiguousarray(images[:batch])
    got = runtime.run({"image": batch_images})
    assert got["probabilities"].shape == (batch, 10)
    assert got["label"].shape == (batch,)
    check(got, batch_images, reference)
    assert runtime.calls == 1


def test_all_runtimes_share_one_session(digits_module, options, session):
    runtimes = [OnnxRuntime(digits_module, options, session) for _ in range(4)]
    assert all(r.compiled is session for r in runtimes)


def test_refuses_to_build_a_private_session(digits_module, options):
    with pytest.raises(TypeError, match="shared session"):
        OnnxRuntime(digits_module, options)


def test_concurrent_runs_from_four_threads_get_their_own_answers(digits_module, options, session, images, reference):
    runtimes = [OnnxRuntime(digits_module, options, session) for _ in range(4)]
    # Each thread owns one runtime (as the pool guarantees) and runs a different slice.
    slices = [np.ascontiguousarray(images[i * 4 : i * 4 + 4]) for i in range(4)]

    def work(i: int) -> list[dict[str, np.ndarray]]:
        return [runtimes[i].run({"image": slices[i]}) for _ in range(50)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for i, outputs in enumerate(results):
        for got in outputs:
            check(got, slices[i], reference)


def test_served_model_answers_through_the_onnxruntime_backend(digits_module, images, reference):
    options = RuntimeOptions(backend="onnxruntime", num_runtimes=2, warmup_iters=1)
    model = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    try:
        first, second = model.pool.runtimes
        assert isinstance(first, OnnxRuntime)
        assert first.compiled is second.compiled

        async def requests():
            return await asyncio.gather(model.infer(images[0].tolist()), model.infer({"image": images[:5].tolist()}))

        single, batch = asyncio.run(requests())
    finally:
        model.close()
    probabilities, label = reference(images[:5])
    assert single.single
    np.testing.assert_allclose(single.outputs["probabilities"], probabilities[0], rtol=RTOL, atol=ATOL)
    assert single.outputs["label"] == label[0]
    check(batch.outputs, images[:5], reference)


def test_model_from_a_torch_export_archive(digits_pt2, options, images, reference):
    module = InferenceModule.from_spec(load_model(str(digits_pt2)))

    runtime = OnnxRuntime(module, options, OnnxRuntime.compile(module, options))
    for batch in (1, 16):
        got = runtime.run({"image": np.ascontiguousarray(images[:batch])})
        probabilities, label = reference(images[:batch])
        np.testing.assert_allclose(got[module.schema.outputs[0].name], probabilities, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(got[module.schema.outputs[1].name], label)


def test_missing_package_says_how_to_install_it(digits_module, options, monkeypatch):
    real_import = importlib.import_module

    def no_onnxruntime(name: str, package: str | None = None):
        if name == "onnxruntime":
            raise ModuleNotFoundError("No module named 'onnxruntime'")
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", no_onnxruntime)
    with pytest.raises(ModelLoadError, match=r"pip install 'inferpool\[onnx\]'"):
        OnnxRuntime.compile(digits_module, options)
