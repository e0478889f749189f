"""The inline executor's one-go path (Pipeline.inline) answers exactly as the queued path
(the worker threads' admit -> prepare -> execute -> finish) does: the same outputs, matching
eager PyTorch, and the same errors, word for word, for every kind of bad request (both take
QuickInputs first; tests/unit/engine/test_quick_inputs.py holds it to the general check)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from inferpool.engine import InferenceModule, RuntimeOptions, ServedModel
from inferpool.engine.errors import EngineError, InvalidInput
from inferpool.engine.plan.threads import ThreadPlan
from tests.support.fault_models import POISON, raising
from tests.unit.engine.fault_models_engine import faulty

PLAN = ThreadPlan(cpus=2, runtimes=1, intra_op_threads=1)


def serve(module: InferenceModule, dispatch: str, **options: Any) -> ServedModel:
    merged: dict[str, Any] = {"num_runtimes": 1, "warmup_iters": 1, "dispatch": dispatch, "max_request_samples": 32}
    merged |= options
    return ServedModel(module, RuntimeOptions(**merged), PLAN, max_queue=8)


@pytest.fixture(params=["eager", "onnxruntime"])
def pair(request, digits_module) -> Iterator[tuple[ServedModel, ServedModel]]:
    inline, threads = (serve(digits_module, mode, backend=request.param) for mode in ("inline", "threads"))
    assert (inline.dispatch_mode, threads.dispatch_mode) == ("inline", "threads")
    yield inline, threads
    inline.close()
    threads.close()


def outcome(model: ServedModel, payload: object, deadline: float | None = None) -> Any:
    try:
        return asyncio.run(model.infer(payload, deadline, "rid-1"))
    except Exception as exc:  # noqa: BLE001 -- compared below, type and words
        return exc


def payloads(images: np.ndarray) -> dict[str, object]:
    return {
        "one sample, lists": images[0].tolist(),
        "a batch, lists": images[:5].tolist(),
        "named": {"image": images[:3].tolist()},
        "an array": images[:4],
        "integers": images[0].astype(np.int64).tolist(),
    }


def test_the_same_outputs_on_both_paths_and_as_eager_pytorch(pair, images, reference):
    inline, threads = pair
    for case, payload in payloads(images).items():
        fast, general = outcome(inline, payload), outcome(threads, payload)
        rows = np.asarray(payload["image"] if isinstance(payload, dict) else payload, np.float32)
        single = rows.ndim == 3
        probabilities, label = reference(rows[None] if single else rows)
        for found in (fast, general):
            assert found.single == single, case
            assert found.batch_size == (1 if single else len(rows)), case
            want = probabilities[0] if single else probabilities
            np.testing.assert_allclose(found.outputs["probabilities"], want, rtol=1e-3, atol=1e-5, err_msg=case)
            np.testing.assert_array_equal(found.outputs["label"], label[0] if single else label)
        np.testing.assert_array_equal(fast.outputs["probabilities"], general.outputs["probabilities"], err_msg=case)


def bad(images: np.ndarray) -> dict[str, object]:
    nan = images[0].copy()
    nan[0, 1, 1] = np.nan
    return {
        "wrong shape": [[1, 2]],
        "NaN": nan.tolist(),
        "infinity": np.full_like(images[0], np.inf).tolist(),
        "out of range": (images[0].astype(np.float64) + 1e39).tolist(),
        "strings": [[["a"] * 8] * 8],
        "booleans": [[[True] * 8] * 8],
        "ragged": [[[0.0] * 8] * 7 + [[0.0] * 3]],
        "empty": [],
        "wrong name": {"picture": images[0].tolist()},
        "too many samples": images[:1].repeat(40, axis=0).tolist(),
        "several inputs for a one-input model": {"image": images[0].tolist(), "mask": [1]},
    }


def test_the_same_error_on_both_paths_for_every_bad_request(pair, images):
    inline, threads = pair
    for case, payload in bad(images).items():
        fast, general = outcome(inline, payload), outcome(threads, payload)
        assert isinstance(fast, InvalidInput), (case, fast)
        assert (type(fast), str(fast), fast.input_name) == (type(general), str(general), general.input_name), case
    assert inline.pool.idle == inline.pool.size


def test_a_deadline_already_past_is_refused_alike(pair, images):
    inline, threads = pair
    past = time.monotonic() - 0.001
    fast, general = outcome(inline, images[0].tolist(), past), outcome(threads, images[0].tolist(), past)
    assert (type(fast), str(fast)) == (type(general), str(general))
    assert "before model 'digits' got it" in str(fast)


@pytest.mark.parametrize("check_inputs", [True, False])
def test_numel_only_checking_answers_alike(digits_module, images, check_inputs):
    inline, threads = (
        serve(digits_module, m, backend="eager", check_inputs=check_inputs) for m in ("inline", "threads")
    )
    try:
        for payload in (images[0].reshape(-1).tolist(), images[:2].reshape(2, -1).tolist(), [[1, 2]]):
            fast, general = outcome(inline, payload), outcome(threads, payload)
            if isinstance(general, EngineError):
                assert (type(fast), str(fast)) == (type(general), str(general))
            else:
                np.testing.assert_array_equal(fast.outputs["probabilities"], general.outputs["probabilities"])
    finally:
        inline.close()
        threads.close()


@pytest.mark.parametrize("spec", ["raising", "nan"])
def test_a_failing_model_or_a_checked_nan_output_fails_alike(spec, images):
    build = raising if spec == "raising" else (lambda: faulty("nan"))
    module = InferenceModule.from_spec(build())
    inline, threads = (serve(module, m, backend="eager", check_outputs=True) for m in ("inline", "threads"))
    poisoned = images[0].copy()
    poisoned[0, 3, 3] = POISON
    try:
        fast, general = outcome(inline, poisoned.tolist()), outcome(threads, poisoned.tolist())
        assert isinstance(fast, EngineError)
        assert (type(fast), str(fast)) == (type(general), str(general))
        assert outcome(inline, images[0].tolist()).outputs["label"].shape == ()  # and it serves on
    finally:
        inline.close()
        threads.close()
