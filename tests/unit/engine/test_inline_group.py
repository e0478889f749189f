"""Inline requests that arrived together run as one model call (inferpool.engine.serving.inline_group):
each answered as it would be alone (``infer_inline``: the same outputs, matching eager PyTorch, the
same errors word for word), in one call where they stack, and a bad request never fails its
neighbours (its checks, its deadline, its handler, a model failure on its sample)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from inferpool.engine import InferenceModule, RuntimeOptions, ServedModel
from inferpool.engine.errors import DeadlineExceeded, EngineError, InvalidInput, ModelFailed
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.serving import inline_group
from inferpool.engine.serving import served as served_module
from inferpool.engine.serving.requests import Prediction
from tests.support.fault_models import POISON, raising
from tests.unit.engine.fault_models_engine import faulty

PLAN = ThreadPlan(cpus=2, runtimes=1, intra_op_threads=1)


def serve(module: InferenceModule, **options: Any) -> ServedModel:
    merged: dict[str, Any] = {"num_runtimes": 1, "warmup_iters": 1, "dispatch": "inline", "max_request_samples": 80}
    return ServedModel(module, RuntimeOptions(**(merged | options)), PLAN, max_queue=8)


@pytest.fixture(params=["eager", "onnxruntime"], scope="module")
def model(request, digits_module) -> Any:
    served = serve(digits_module, backend=request.param)
    assert served.inline
    assert served.pipeline.stackable
    yield served
    served.close()


class Calls:
    """Counts the model calls and the rows of each."""

    def __init__(self, served: ServedModel, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows: list[int] = []
        run = served.runtimes.run

        def counted(arrays: Any) -> Any:
            self.rows.append(next(iter(arrays.values())).shape[0])
            return run(arrays)

        monkeypatch.setattr(served.runtimes, "run", counted)


def alone(model: ServedModel, payload: object, deadline: float | None = None) -> Any:
    try:
        return model.infer_inline(payload, deadline, "alone")
    except Exception as exc:  # noqa: BLE001 -- compared below, type and words
        return exc


def same(found: Any, want: Any) -> None:
    if isinstance(want, Exception):
        assert (type(found), str(found)) == (type(want), str(want))
        return
    assert isinstance(found, Prediction), found
    assert found.single == want.single
    np.testing.assert_allclose(found.outputs["probabilities"], want.outputs["probabilities"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(found.outputs["label"], want.outputs["label"])


def test_requests_together_run_as_one_call_and_match_eager_pytorch(model, images, reference, monkeypatch):
    payloads: list[object] = [images[0].tolist(), images[1:4].tolist(), {"image": images[4:6].tolist()}, images[6]]
    calls = Calls(model, monkeypatch)
    found = model.infer_inline_together([(p, None, f"r{i}") for i, p in enumerate(payloads)])
    assert calls.rows == [1 + 3 + 2 + 1]
    probabilities, label = reference(images[:7])
    rows = [slice(0, 1), slice(1, 4), slice(4, 6), slice(6, 7)]
    for payload, prediction, at in zip(payloads, found, rows, strict=True):
        assert isinstance(prediction, Prediction)
        single = isinstance(payload, np.ndarray) or np.asarray(payload).ndim == 3
        assert prediction.single == single
        assert prediction.batch_size == 7
        want_p, want_l = (probabilities[at][0], label[at][0]) if single else (probabilities[at], label[at])
        np.testing.assert_allclose(prediction.outputs["probabilities"], want_p, rtol=1e-3, atol=1e-5)
        np.testing.assert_array_equal(prediction.outputs["label"], want_l)
        assert prediction.batch_seconds > 0  # it waited for its neighbours' checks
    assert len({p.dispatched for p in found if isinstance(p, Prediction)}) == 1  # one call: one dispatch


def test_bad_requests_get_their_own_errors_and_their_neighbours_their_answers(model, images, monkeypatch):
    past = time.monotonic() - 0.001
    requests = [
        (images[0].tolist(), None),
        ([[1, 2]], None),  # wrong shape
        (images[1].tolist(), past),  # its deadline passed
        ((images[2].astype(np.float64) + 1e39).tolist(), None),  # out of float32's range
        (images[:1].repeat(90, axis=0).tolist(), None),  # too many samples
        (images[3].tolist(), None),
    ]
    calls = Calls(model, monkeypatch)
    found = model.infer_inline_together([(p, d, f"r{i}") for i, (p, d) in enumerate(requests)])
    wants = [alone(model, p, d) for p, d in requests]
    assert calls.rows[0] == 2  # the two good ones, together
    for found_one, want in zip(found, wants, strict=True):
        same(found_one, want)
    assert [type(f) for f in found[1:5]] == [InvalidInput, DeadlineExceeded, InvalidInput, InvalidInput]
    assert model.pool.idle == model.pool.size


def test_a_request_alone_takes_the_inline_path(model, images, monkeypatch):
    taken: list[object] = []

    def together(*args: object) -> list[object]:
        taken.append(args)
        return []

    monkeypatch.setattr(served_module, "run_together", together)
    (found,) = model.infer_inline_together([(images[0].tolist(), None, "one")])
    same(found, alone(model, images[0].tolist()))
    assert taken == []


def test_calls_hold_at_most_group_rows_samples(model, images, monkeypatch):
    calls = Calls(model, monkeypatch)
    big = images[:1].repeat(inline_group.GROUP_ROWS - 2, axis=0).tolist()
    payloads = [images[0].tolist(), big, images[1:4].tolist(), images[:1].repeat(70, axis=0).tolist()]
    found = model.infer_inline_together([(p, None, None) for p in payloads])
    assert calls.rows == [1 + inline_group.GROUP_ROWS - 2, 3, 70]  # a request of more runs alone
    for payload, prediction in zip(payloads, found, strict=True):
        same(prediction, alone(model, payload))


def test_a_deadline_that_passes_during_the_call_fails_only_its_request(model, images, monkeypatch):
    run = model.runtimes.run

    def slow(arrays: Any) -> Any:
        time.sleep(0.05)
        return run(arrays)

    monkeypatch.setattr(model.runtimes, "run", slow)
    found = model.infer_inline_together(
        [(images[0].tolist(), time.monotonic() + 0.02, "late"), (images[1].tolist(), time.monotonic() + 5, "fine")]
    )
    assert isinstance(found[0], DeadlineExceeded)
    assert "while model 'digits' ran it" in str(found[0])
    assert isinstance(found[1], Prediction)


@pytest.mark.parametrize("spec", ["raising", "nan"])
def test_a_sample_that_fails_the_model_fails_only_its_request(spec, images):
    build = raising if spec == "raising" else (lambda: faulty("nan"))
    served = serve(InferenceModule.from_spec(build()), backend="eager", check_outputs=True)
    poisoned = images[0].copy()
    poisoned[0, 3, 3] = POISON
    try:
        payloads = [images[1].tolist(), poisoned.tolist(), images[2:4].tolist()]
        found = served.infer_inline_together([(p, None, f"r{i}") for i, p in enumerate(payloads)])
        for payload, found_one in zip(payloads, found, strict=True):
            same(found_one, alone(served, payload))
        assert isinstance(found[1], EngineError)
        assert isinstance(found[0], Prediction)
        assert isinstance(found[2], Prediction)
    finally:
        served.close()


def test_a_model_whose_outputs_are_not_a_row_a_sample_stops_being_stacked(digits_module, images, monkeypatch):
    served = serve(digits_module, backend="eager")
    run = served.runtimes.run
    monkeypatch.setattr(served.runtimes, "run", lambda arrays: {n: o[:1] for n, o in run(arrays).items()})
    try:
        found = served.infer_inline_together([(images[0].tolist(), None, "a"), (images[1].tolist(), None, "b")])
        assert all(isinstance(f, Prediction) for f in found)  # each ran again alone
        assert not served.pipeline.stackable
    finally:
        served.close()


def test_a_model_shutting_down_refuses_each_request(digits_module, images):
    served = serve(digits_module, backend="eager")
    served.close()
    found = served.infer_inline_together([(images[0].tolist(), None, "a"), (images[1].tolist(), None, "b")])
    assert [type(f).__name__ for f in found] == ["NotReady", "NotReady"]


def test_a_failed_stacked_call_is_not_answered_as_a_model_failure_of_the_good_ones(model, images, monkeypatch):
    run = model.runtimes.run

    def fails_when_stacked(arrays: Any) -> Any:
        if next(iter(arrays.values())).shape[0] > 1:
            raise RuntimeError("stacked")
        return run(arrays)

    monkeypatch.setattr(model.runtimes, "run", fails_when_stacked)
    found = model.infer_inline_together([(images[0].tolist(), None, "a"), (images[1].tolist(), None, "b")])
    assert not any(isinstance(f, ModelFailed) for f in found)
    assert model.pipeline.stackable
