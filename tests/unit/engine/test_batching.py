from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from inferpool.engine import InferenceModule, ModelFailed, RuntimeOptions, ServedModel
from inferpool.engine.executors import ExecutorConfig
from inferpool.engine.executors.batching import Batcher
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.serving.requests import Work
from tests.support.fault_models import POISON, raising
from tests.support.pipelines import fake_pipeline


def serve(module, runtimes=2, **options) -> ServedModel:
    options = {"backend": "eager", "num_runtimes": runtimes, "warmup_iters": 1, **options}
    plan = ThreadPlan(cpus=2, runtimes=runtimes, intra_op_threads=1)
    return ServedModel(module, RuntimeOptions(**options), plan, max_queue=64)


@pytest.fixture
def batched(digits_module):
    # A long delay makes the composition of batches depend on arrival only, not on timing.
    model = serve(digits_module, max_batch_size=8, max_queue_delay_us=20_000)
    yield model
    model.close()


def model_calls(model: ServedModel) -> int:
    return sum(runtime.calls for runtime in model.pool.runtimes)


def test_mixed_batch_sizes_each_get_exactly_their_own_rows(batched, images, reference):
    # Rows 0..15 split into requests of 1 (single sample), 1 (batch of one), 2 and 3 samples.
    cuts = [(0, 1, True), (1, 2, False), (2, 4, False), (4, 5, True), (5, 8, False), (8, 9, True), (9, 11, False)]
    cuts += [(11, 12, True), (12, 15, False), (15, 16, True)]

    async def many():
        requests = [images[a].tolist() if single else {"image": images[a:b].tolist()} for a, b, single in cuts]
        return await asyncio.gather(*(batched.infer(r) for r in requests))

    calls = model_calls(batched)
    predictions = asyncio.run(many())
    calls = model_calls(batched) - calls
    probabilities, labels = reference(images)
    for (a, b, single), p in zip(cuts, predictions, strict=True):
        assert p.single is single
        got = p.outputs["probabilities"]
        assert got.shape == ((10,) if single else (b - a, 10))
        # Batch composition changes kernel blocking: equal to float rounding, not bitwise.
        np.testing.assert_allclose(got, probabilities[a] if single else probabilities[a:b], rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(p.outputs["label"], labels[a] if single else labels[a:b])
        assert p.batch_size >= b - a
        assert p.batch_seconds >= 0
    assert calls < len(cuts), f"{calls} model calls for {len(cuts)} requests: nothing was batched"
    assert max(p.batch_size for p in predictions) > 1
    assert batched.admission.requests == 0
    assert batched.admission.samples == 0


def test_a_failing_request_fails_only_its_own_batch():
    # One worker and batches of 4: requests 0-3 form the first call, 4-7 the second.
    model = serve(InferenceModule.from_spec(raising()), runtimes=1, max_batch_size=4, max_queue_delay_us=20_000)
    good = np.random.default_rng(1).integers(0, 17, size=(1, 8, 8)).astype(np.float32)
    poisoned = good.copy()
    poisoned[0, 0, 0] = POISON

    async def many():
        requests = [(poisoned if i == 1 else good).tolist() for i in range(8)]
        return await asyncio.gather(*(model.infer(r) for r in requests), return_exceptions=True)

    try:
        results = asyncio.run(many())
        assert all(isinstance(r, ModelFailed) for r in results[:4]), results[:4]
        assert len({id(r) for r in results[:4]}) == 4  # each caller its own exception object
        assert all(r.batch_size == 4 for r in results[4:]), results[4:]
        assert model.pool.idle == model.pool.size
        assert model.dispatch_mode == "batch"
        assert model.executor.alive == 1
        assert asyncio.run(model.infer(good.tolist())).outputs["probabilities"].shape == (10,)
    finally:
        model.close()


def test_preferred_size_dispatches_without_waiting(digits_module, images):
    # The delay would hold a lone request for 5 s; a preferred size of 1 sends it at once.
    model = serve(digits_module, runtimes=1, max_batch_size=8, max_queue_delay_us=5e6, preferred_batch_sizes=(1,))
    try:
        assert_answers_alone_at_once(model, images[0])
    finally:
        model.close()


def assert_answers_alone_at_once(model: ServedModel, image) -> None:
    """A lone request is answered in well under the 5 s delay the tests configure, in a batch of one."""
    started = time.perf_counter()
    prediction = asyncio.run(model.infer(image.tolist()))
    assert time.perf_counter() - started < 1.0
    assert prediction.batch_size == 1


class FakeModel:
    """The batcher alone: inputs are float arrays of any shape, the model doubles them and logs each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def run(self, arrays):
        self.calls.append(arrays["x"].shape)
        return {"y": arrays["x"] * 2}

    def batcher(self, max_delay: float) -> Batcher:
        return batcher_of(self.run, threads=1, max_batch_size=8, max_delay=max_delay)


def batcher_of(run, *, threads: int, max_batch_size: int, max_delay: float, preprocess=None) -> Batcher:
    config = ExecutorConfig(
        name="test", threads=threads, initializer=lambda: None, max_batch_size=max_batch_size, max_delay=max_delay,
        call_seconds=lambda rows: 0.01,
    )  # fmt: skip
    return Batcher(fake_pipeline(run, preprocess=preprocess), config)


def submit(batcher: Batcher, inputs, deadline: float | None = None):
    return batcher.run(Work(inputs, 1, deadline))


def test_only_equal_per_sample_shapes_share_a_call():
    fake = FakeModel()
    batcher = fake.batcher(max_delay=0.02)

    async def many():
        shapes = [3, 3, 5, 5, 3]
        return await asyncio.gather(*(submit(batcher, np.full((1, n), i).tolist()) for i, n in enumerate(shapes)))

    try:
        results = asyncio.run(many())
    finally:
        batcher.close()
    for i, (p, n) in enumerate(zip(results, [3, 3, 5, 5, 3], strict=True)):
        np.testing.assert_array_equal(p.outputs["y"], np.full((1, n), 2 * i))
    # Each shape batches on its own (a request of another shape does not close a batch); the
    # group whose first request came first runs first.
    assert fake.calls == [(3, 3), (2, 5)]


def test_shapes_interleaved_under_load_still_fill_their_batches():
    fake = FakeModel()
    batcher = fake.batcher(max_delay=5.0)  # only full batches run before the delay

    async def many():
        # Alternating shapes, as sentences alternating between two length buckets.
        return await asyncio.gather(*(submit(batcher, np.full((1, 3 + i % 2 * 2), i).tolist()) for i in range(32)))

    try:
        results = asyncio.run(many())
    finally:
        batcher.close()
    for i, p in enumerate(results):
        np.testing.assert_array_equal(p.outputs["y"], np.full((1, 3 + i % 2 * 2), 2 * i))
    assert sorted(fake.calls) == [(8, 3), (8, 3), (8, 5), (8, 5)]


def test_a_full_batch_runs_before_the_rest_of_the_queue_is_validated():
    events: list[str] = []

    def slow_coerce(inputs):
        time.sleep(0.005)  # a handler's preprocess (tokenising) or a large input's validation
        events.append("coerce")
        return {"x": np.asarray(inputs, dtype=np.float32)}

    def run(arrays):
        events.append("run")
        return {"y": arrays["x"] * 2}

    batcher = batcher_of(run, threads=2, max_batch_size=2, max_delay=5.0, preprocess=slow_coerce)

    async def many():
        return await asyncio.gather(*(submit(batcher, [[float(i)]]) for i in range(20)))

    try:
        results = asyncio.run(many())
    finally:
        batcher.close()
    for i, p in enumerate(results):
        np.testing.assert_array_equal(p.outputs["y"], [[2.0 * i]])
    # The first pair ran long before the 20th request was validated.
    assert events.index("run") < len(events) - 1 - events[::-1].index("coerce") - 10, events


def test_a_full_group_runs_and_its_overflow_starts_the_next_batch():
    fake = FakeModel()
    batcher = fake.batcher(max_delay=0.05)

    async def many():
        # 5 + 5 rows of one shape: the second request does not fit beside the first (max 8).
        return await asyncio.gather(*(submit(batcher, np.full((5, 2), i).tolist()) for i in range(2)))

    try:
        results = asyncio.run(many())
    finally:
        batcher.close()
    for i, p in enumerate(results):
        np.testing.assert_array_equal(p.outputs["y"], np.full((5, 2), 2 * i))
        assert p.batch_size == 5
    assert fake.calls == [(5, 2), (5, 2)]


def test_a_batch_runs_early_when_waiting_would_break_a_deadline():
    fake = FakeModel()
    batcher = fake.batcher(max_delay=10.0)  # without the deadline a lone request would wait 10 s

    async def one():
        started = time.monotonic()
        result = await submit(batcher, [[1.0]], started + 0.1)
        return result, time.monotonic() - started

    try:
        result, waited = asyncio.run(one())
    finally:
        batcher.close()
    assert waited < 0.5
    assert result.batch_size == 1
    assert fake.calls == [(1, 1)]


def test_close_stops_every_batcher_thread():
    fake = FakeModel()
    batcher = fake.batcher(max_delay=0.001)
    batcher.close()
    assert batcher.alive == 0
    assert not any(t.name.startswith("test-") for t in threading.enumerate())
