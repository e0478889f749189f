from __future__ import annotations

import asyncio
import json
import logging
import threading
import warnings

import numpy as np
import pytest
import torch

from inferpool.engine import (
    BACKENDS,
    InferenceModule,
    ModelLoadError,
    Prediction,
    RuntimeOptions,
    ServedModel,
    load_model,
)
from inferpool.engine.backends.torchscript import StaticArtifact, TorchScriptRuntime
from inferpool.engine.models.torchscript_archive import EMBEDDED_DESCRIPTION, TorchScriptArchive, quiet_jit
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.zoo import digits, mlp

# Static Runtime runs the same ATen kernels as eager, sometimes as out= or fused variants:
# equal to float rounding, not bitwise.
RTOL, ATOL = 1e-5, 1e-6
DESCRIPTION = {"inputs": {"image": [1, 1, 8, 8]}, "output_names": ["probabilities", "label"]}


def compile_quietly(module: InferenceModule) -> StaticArtifact:
    with pytest.warns(FutureWarning, match="TorchScript, which PyTorch has deprecated"):
        return TorchScriptRuntime.compile(module, RuntimeOptions())


@pytest.fixture(scope="module")
def artifact(digits_module):
    return compile_quietly(digits_module)


@pytest.fixture(scope="module")
def mlp_module():
    return InferenceModule.from_spec(mlp.build())


@pytest.fixture
def digits_ts(tmp_path):
    """The digits CNN traced and saved as a legacy TorchScript archive, inputs described beside it."""
    with quiet_jit():
        traced = torch.jit.trace(digits.build().module.eval(), (torch.zeros(2, 1, 8, 8),))
        path = tmp_path / "digits.ts"
        torch.jit.save(traced, str(path))
    (tmp_path / "digits.ts.json").write_text(json.dumps(DESCRIPTION))
    return path


def check_digits(got, images, reference):
    probabilities, label = reference(images)
    np.testing.assert_allclose(got["probabilities"], probabilities, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got["label"], label)


def test_registered_by_name():
    assert BACKENDS["torchscript"] is TorchScriptRuntime


def test_compile_warns_once_that_torchscript_is_deprecated(digits_module, caplog):
    with caplog.at_level(logging.WARNING), pytest.warns(FutureWarning) as caught:
        TorchScriptRuntime.compile(digits_module, RuntimeOptions())
    assert len(caught) == 1  # torch's own DeprecationWarnings from torch.jit.* are not passed on
    assert "torch.export" in str(caught[0].message)
    assert sum("deprecated" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_digits_matches_eager_at_any_batch_size(digits_module, artifact, options, images, reference, batch):
    runtime = TorchScriptRuntime(digits_module, options, artifact)
    batch_images = np.ascontiguousarray(images[:batch])
    got = runtime.run({"image": batch_images})
    assert got["probabilities"].shape == (batch, 10)
    assert got["label"].dtype == np.int64
    check_digits(got, batch_images, reference)
    assert artifact.origin == "traced"  # the CNN closes over a module-level float: not scriptable


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_mlp_matches_eager_at_any_batch_size(mlp_module, options, batch):
    artifact = compile_quietly(mlp_module)
    x = np.random.default_rng(1).standard_normal((batch, 64)).astype(np.float32)
    got = TorchScriptRuntime(mlp_module, options, artifact).run({"x": x})
    with torch.inference_mode():
        want = mlp.build().module.eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got["logits"], want, rtol=RTOL, atol=ATOL)
    assert artifact.origin == "scripted"


def test_refuses_to_build_a_private_module(digits_module, options):
    with pytest.raises(TypeError, match="shared module"):
        TorchScriptRuntime(digits_module, options)


def test_four_threads_at_once_on_the_shared_module_get_their_own_answers(
    digits_module, options, artifact, images, reference
):
    """The binding holds the GIL and the lock serialises calls: no thread may see another's
    buffers. Threads start together and use different batch sizes, so shapes interleave too."""
    runtimes = [TorchScriptRuntime(digits_module, options, artifact) for _ in range(4)]
    assert all(r.compiled is artifact for r in runtimes)
    start = threading.Barrier(4)
    answers: dict[int, list[dict[str, np.ndarray]]] = {}

    def work(thread: int) -> None:
        chunk = np.ascontiguousarray(images[thread : thread + 1 + 3 * thread])  # 1, 4, 7 and 10 rows
        start.wait()
        answers[thread] = [runtimes[thread].run({"image": chunk}) for _ in range(50)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, outputs in sorted(answers.items()):
        chunk = images[i : i + 1 + 3 * i]
        assert all(got["label"].shape == (len(chunk),) for got in outputs)
        for got in outputs:
            check_digits(got, chunk, reference)
    assert len(answers) == 4


def test_served_model_answers_through_the_torchscript_backend(digits_module, images, reference):
    options = RuntimeOptions(backend="torchscript", num_runtimes=2, warmup_iters=1)
    with pytest.warns(FutureWarning):
        model = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    try:
        assert model.info.backend == "torchscript"
        assert {id(r.compiled) for r in model.pool.runtimes} == {id(model.selection.compiled)}
        answers = asyncio.run(_ask(model, [images[0].tolist(), {"image": images[3:9].tolist()}]))
    finally:
        model.close()
    one, six = answers
    assert one.single
    assert not six.single
    check_digits({name: out[None] for name, out in one.outputs.items()}, images[:1], reference)
    check_digits(six.outputs, images[3:9], reference)


async def _ask(model: ServedModel, payloads: list[object]) -> list[Prediction]:
    return list(await asyncio.gather(*(model.infer(payload) for payload in payloads)))


def test_legacy_archive_with_a_description_beside_it(digits_ts, options, images, reference):
    spec = load_model(str(digits_ts))
    assert isinstance(spec.module, TorchScriptArchive)
    module = InferenceModule.from_spec(spec)
    assert module.name == "digits"
    assert [s.name for s in module.schema.outputs] == ["probabilities", "label"]
    artifact = compile_quietly(module)
    assert artifact.origin == "archive"
    got = TorchScriptRuntime(module, options, artifact).run({"image": np.ascontiguousarray(images)})
    check_digits(got, images, reference)


def test_legacy_archive_with_the_description_embedded(tmp_path):
    with quiet_jit():
        scripted = torch.jit.script(mlp.build().module.eval())
        path = tmp_path / "mlp.torchscript"
        description = {"inputs": {"x": {"shape": [1, 64], "dtype": "float32"}}, "name": "legacy-mlp"}
        torch.jit.save(scripted, str(path), _extra_files={EMBEDDED_DESCRIPTION: json.dumps(description)})
    module = InferenceModule.from_spec(load_model(str(path)))
    assert module.name == "legacy-mlp"
    assert module.schema.inputs[0].shape == (None, 64)


def test_archive_without_a_description_says_what_to_write(digits_ts):
    (digits_ts.parent / "digits.ts.json").unlink()
    with pytest.raises(ModelLoadError, match=r"does not record its input shapes.*digits\.ts\.json.*\"inputs\""):
        load_model(str(digits_ts))


def test_description_naming_other_inputs_is_refused(digits_ts):
    (digits_ts.parent / "digits.ts.json").write_text(json.dumps({"inputs": {"pixels": [1, 1, 8, 8]}}))
    with pytest.raises(ModelLoadError, match=r"must name the forward's inputs \['image'\]"):
        load_model(str(digits_ts))


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_or_corrupt_archive_is_a_clear_load_error(digits_ts, keep):
    data = digits_ts.read_bytes()
    digits_ts.write_bytes(data[: int(len(data) * keep)] or b"not an archive")
    with pytest.raises(ModelLoadError, match=r"cannot load TorchScript archive .*truncated, corrupt or not written"):
        load_model(str(digits_ts))


def test_auto_serves_a_legacy_archive_with_a_backend_that_can_run_it(digits_ts, images, reference):
    options = RuntimeOptions(backend="auto", auto_backends=("eager", "torchscript"), num_runtimes=1, warmup_iters=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ServedModel.load(str(digits_ts), options)
    try:
        chosen = model.info.backend
        assert [t.backend for t in model.selection.trials if t.error is None] == ["eager", "torchscript"]
        answer = asyncio.run(model.infer({"image": images[:5].tolist()}))
    finally:
        model.close()
    check_digits(answer.outputs, images[:5], reference)
    deprecations = [w for w in caught if issubclass(w.category, FutureWarning)]
    assert len(deprecations) == (chosen == "torchscript")  # only the winner's warning is passed on
