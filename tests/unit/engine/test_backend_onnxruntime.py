from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson
import pytest
import torch

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions, ServedModel, load_model
from inferpool.engine.backends.onnxruntime.export import export_key, export_program, source_key
from inferpool.engine.backends.onnxruntime.runtime import OnnxRuntime, load_session
from inferpool.engine.plan.threads import ThreadPlan
from tests.support.backend_checks import check_digits, hide_package

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
    check_digits(got, images, reference, RTOL, ATOL)


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


def test_int64_outputs_are_numpy_int64_which_orjson_encodes(digits_module, options, session, images):
    # onnxruntime's own arrays are numpy.longlong, which orjson refuses without a fallback.
    got = OnnxRuntime(digits_module, options, session).run({"image": np.ascontiguousarray(images[:2])})
    assert got["label"].dtype.type is np.int64
    assert orjson.loads(orjson.dumps(got["label"][0], option=orjson.OPT_SERIALIZE_NUMPY)) == int(got["label"][0])


def test_only_a_run_of_more_than_one_row_shrinks_the_arena_after_itself(digits_module, session, images):
    class Spy:
        def __init__(self) -> None:
            self.shrinks: list[bool] = []

        def run(self, names, feed, run_options):
            try:
                entry = run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage")
            except RuntimeError:  # not set
                entry = ""
            self.shrinks.append(entry == "cpu:0")
            return session.run(names, feed, run_options)

    spy = Spy()
    runtime = OnnxRuntime(digits_module, RuntimeOptions(intra_op_threads=1, cleanup_activations=True), spy)
    for rows in (1, 16, 1):
        runtime.run({"image": np.ascontiguousarray(images[:rows])})
    kept = OnnxRuntime(digits_module, RuntimeOptions(intra_op_threads=1, cleanup_activations=False), spy)
    kept.run({"image": np.ascontiguousarray(images[:16])})
    assert spy.shrinks == [False, True, False, False]


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
    hide_package(monkeypatch, "onnxruntime")
    with pytest.raises(ModelLoadError, match=r"pip install 'inferpool\[onnx\]'"):
        OnnxRuntime.compile(digits_module, options)


def cached_options(cache, **more) -> RuntimeOptions:
    return RuntimeOptions(backend="onnxruntime", compile_cache_dir=str(cache), warmup_iters=1, **more)


def no_export(monkeypatch) -> None:
    def exporter(*args, **kwargs):
        raise AssertionError("the ONNX exporter or torch.export ran on a warm start")

    monkeypatch.setattr(torch.onnx, "export", exporter)
    monkeypatch.setattr(torch.export, "export", exporter)  # a warm start does not even trace


def cached_file(cache) -> Path:
    (path,) = cache.glob("digits-*.onnx")
    return path


def test_the_export_is_cached_and_a_warm_start_does_not_export(digits_module, tmp_path, images, reference, monkeypatch):
    options = cached_options(tmp_path)
    _, exported = load_session(digits_module, options)
    assert exported.export_seconds is not None
    assert exported.model == cached_file(tmp_path)
    assert exported.model.name == f"digits-{exported.key}.onnx"
    no_export(monkeypatch)
    _, again = load_session(digits_module, options)
    assert (again.model, again.key, again.export_seconds) == (exported.model, exported.key, None)
    runtime = OnnxRuntime(digits_module, options, OnnxRuntime.compile(digits_module, options))
    check(runtime.run({"image": images[:3]}), images[:3], reference)


def test_the_key_covers_the_weights(digits_module, tmp_path):
    from inferpool.engine.zoo.digits import build

    spec = build()
    with torch.no_grad():
        next(spec.module.parameters())[0] += 1.0
    changed = InferenceModule.from_spec(spec)
    assert export_key(changed, export_program(changed)) != export_key(digits_module, export_program(digits_module))
    assert source_key(changed) != source_key(digits_module)


def test_a_model_whose_source_cannot_be_read_is_keyed_by_its_exported_graph(digits_module, tmp_path, monkeypatch):
    import inferpool.engine.backends.onnxruntime.export as onnx_export

    def unreadable(kind: type) -> str:
        raise OSError("could not get source code")  # as for a class defined in a REPL

    monkeypatch.setattr(onnx_export, "_class_source", unreadable)
    assert source_key(digits_module) is None
    _, exported = load_session(digits_module, cached_options(tmp_path))
    assert exported.key == export_key(digits_module, export_program(digits_module))


def test_a_corrupt_cached_file_is_rebuilt_with_a_warning_naming_it(digits_module, tmp_path, caplog):
    options = cached_options(tmp_path)
    load_session(digits_module, options)
    path = cached_file(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # as a crash mid-copy would leave it
    with caplog.at_level(logging.WARNING):
        _, rebuilt = load_session(digits_module, options)
    assert f"the cached ONNX export {path} is unusable" in caplog.text
    assert rebuilt.export_seconds is not None
    assert rebuilt.model == path
    assert path.read_bytes() == good


def edit_cached(path: Path, edit) -> None:
    import onnx

    model = onnx.load(str(path))
    edit(model)
    onnx.save(model, str(path))


def test_a_file_under_another_key_is_rebuilt(digits_module, tmp_path, caplog):
    options = cached_options(tmp_path)
    load_session(digits_module, options)
    path = cached_file(tmp_path)
    edit_cached(path, lambda model: setattr(model.metadata_props[-1], "value", "another-key"))
    with caplog.at_level(logging.WARNING):
        _, rebuilt = load_session(digits_module, options)
    assert str(path) in caplog.text
    assert "is not the ONNX export of 'digits' it is named for" in caplog.text
    assert rebuilt.export_seconds is not None


def test_parity_is_checked_on_a_warm_start(digits_module, tmp_path, caplog, images, reference):
    """A cached file with the right key and names but other weights (a stale or tampered
    export) must not serve: the warm start compares it with eager, and rebuilds it."""
    import onnx.numpy_helper

    options = cached_options(tmp_path)
    load_session(digits_module, options)
    path = cached_file(tmp_path)

    def shift_the_weights(model):  # every float weight and bias (the example image is all zeros)
        for weight in model.graph.initializer:
            if weight.data_type == onnx.TensorProto.FLOAT and weight.dims:
                shifted = onnx.numpy_helper.to_array(weight) + 0.1
                weight.CopyFrom(onnx.numpy_helper.from_array(shifted, weight.name))

    edit_cached(path, shift_the_weights)
    with caplog.at_level(logging.WARNING):
        session, rebuilt = load_session(digits_module, options)
    assert "disagrees with the eager model" in caplog.text
    assert str(path) in caplog.text
    assert rebuilt.export_seconds is not None
    check(OnnxRuntime(digits_module, options, session).run({"image": images[:4]}), images[:4], reference)


def test_an_unwritable_cache_serves_the_export_from_memory(digits_module, tmp_path, caplog, images, reference):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.WARNING):
        session, exported = load_session(digits_module, cached_options(blocked))
    assert isinstance(exported.model, bytes)
    assert "cannot cache the ONNX export of 'digits'" in caplog.text
    check(OnnxRuntime(digits_module, cached_options(blocked), session).run({"image": images}), images, reference)
