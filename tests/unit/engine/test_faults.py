"""Faults in the model or its threads: the caller gets a clear error, the pool and the worker
threads heal (same size, fresh runtime or thread), and the next request succeeds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from inferpool.engine import (
    DeadlineExceeded,
    InferenceModule,
    ModelFailed,
    ModelSpec,
    NonFiniteOutput,
    Prediction,
    RuntimeOptions,
    ServedModel,
    WorkerDied,
)
from inferpool.engine.executors.threads import ThreadSet
from inferpool.engine.plan.threads import ThreadPlan
from tests.support.fault_models import POISON, raising
from tests.unit.engine.fault_models_engine import faulty

BATCHING = {"unbatched": 1, "batched": 4}
MODES = pytest.mark.parametrize("max_batch_size", BATCHING.values(), ids=BATCHING.keys())


def serve(spec_factory: Callable[[], ModelSpec], max_batch_size: int, runtimes: int = 2, **options: Any) -> ServedModel:
    module = InferenceModule.from_spec(spec_factory())
    # A long batching delay makes batch composition depend on arrival only, not on timing.
    merged: dict[str, Any] = {"backend": "eager", "dispatch": "threads", "num_runtimes": runtimes, "warmup_iters": 1}
    merged["max_batch_size"] = max_batch_size
    merged |= {"max_queue_delay_us": 20_000} if max_batch_size > 1 else {}
    plan = ThreadPlan(cpus=2, runtimes=runtimes, intra_op_threads=1)
    return ServedModel(module, RuntimeOptions(**(merged | options)), plan, max_queue=16)


@pytest.fixture
def good() -> np.ndarray:
    return np.random.default_rng(1).integers(0, 17, size=(1, 8, 8)).astype(np.float32)


@pytest.fixture
def poisoned(good: np.ndarray) -> np.ndarray:
    bad = good.copy()
    bad[0, 3, 3] = POISON
    return bad


def eventually(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def settled(model: ServedModel) -> bool:
    """Every runtime back in the pool and nothing left in admission's books."""
    return model.pool.idle == model.pool.size and model.admission.requests == 0


def assert_serves(model: ServedModel, good: np.ndarray, requests: int = 6) -> None:
    """Concurrent good requests all succeed (on every worker thread and runtime)."""

    async def many() -> list[Prediction]:
        return await asyncio.gather(*(model.infer(good.tolist()) for _ in range(requests)))

    for prediction in asyncio.run(many()):
        assert prediction.outputs["probabilities"].shape == (10,)


@MODES
def test_a_model_exception_replaces_the_runtime_that_raised(max_batch_size, good, poisoned):
    model = serve(raising, max_batch_size)
    try:
        before = model.pool.runtimes
        with pytest.raises(ModelFailed, match=r"the model failed on this input \(RuntimeError\)"):
            asyncio.run(model.infer(poisoned.tolist()))
        after = model.pool.runtimes
        assert len(after) == len(before) == model.pool.size == 2
        kept = [runtime for runtime in after if any(runtime is old for old in before)]
        (fresh,) = [runtime for runtime in after if all(runtime is not old for old in before)]
        assert len(kept) == 1
        assert fresh.calls == model.options.warmup_iters  # built and warmed, never served yet
        assert model.replaced_runtimes == 1
        assert eventually(lambda: settled(model))
        assert model.healthy
        assert_serves(model, good)
        assert model.replaced_runtimes == 1
    finally:
        model.close()


def test_invalid_input_does_not_replace_a_runtime(good):
    model = serve(raising, 1)
    try:
        before = model.pool.runtimes
        with pytest.raises(Exception, match="input 'image'"):
            asyncio.run(model.infer([[1, 2]]))
        assert all(a is b for a, b in zip(model.pool.runtimes, before, strict=True))
        assert model.replaced_runtimes == 0
    finally:
        model.close()


@MODES
def test_nan_output_fails_the_request_naming_the_output_when_checked(max_batch_size, good, poisoned):
    model = serve(partial_faulty("nan"), max_batch_size, check_outputs=True)
    try:
        with pytest.raises(NonFiniteOutput, match="NaN or infinity in output 'probabilities'") as caught:
            asyncio.run(model.infer(poisoned.tolist()))
        assert isinstance(caught.value, ModelFailed)  # a 500 at the service's boundary
        assert model.replaced_runtimes == 0  # the input caused it, not a broken runtime
        assert eventually(lambda: settled(model))
        assert_serves(model, good)
    finally:
        model.close()


def test_with_batching_a_nan_row_fails_only_the_request_it_belongs_to(good, poisoned):
    # One worker and batches of 4: the four requests form one model call.
    model = serve(partial_faulty("nan"), 4, runtimes=1, check_outputs=True)

    async def four() -> list[Prediction | BaseException]:
        requests = [(poisoned if i == 2 else good).tolist() for i in range(4)]
        return await asyncio.gather(*(model.infer(r) for r in requests), return_exceptions=True)

    try:
        results = asyncio.run(four())
        assert isinstance(results[2], NonFiniteOutput), results
        for i in (0, 1, 3):
            result = results[i]
            assert isinstance(result, Prediction), results
            assert result.batch_size == 4
            assert np.isfinite(result.outputs["probabilities"]).all()
        assert eventually(lambda: settled(model))
    finally:
        model.close()


@MODES
def test_nan_output_passes_through_when_not_checked(max_batch_size, poisoned):
    model = serve(partial_faulty("nan"), max_batch_size)
    try:
        assert model.options.check_outputs is False  # the default
        prediction = asyncio.run(model.infer(poisoned.tolist()))
        assert np.isnan(prediction.outputs["probabilities"]).all()
    finally:
        model.close()


@MODES
def test_a_job_that_kills_its_worker_thread_gets_an_error_and_the_thread_is_replaced(
    max_batch_size, good, poisoned, caplog
):
    model = serve(partial_faulty("exit"), max_batch_size)
    try:
        assert model.healthy
        assert model.live_workers == model.worker_threads == 2
        with pytest.raises(WorkerDied, match=r"worker thread running this request died \(SystemExit\)") as caught:
            asyncio.run(model.infer(poisoned.tolist()))
        assert isinstance(caught.value, ModelFailed)
        assert eventually(lambda: model.replaced_workers == 1 and model.healthy)
        assert model.live_workers == model.worker_threads == 2
        assert model.pool.size == 2
        assert model.replaced_runtimes == 1  # the runtime it died on is not trusted either
        assert eventually(lambda: settled(model))
        assert_serves(model, good, requests=8)
        assert "died; starting a replacement" in caplog.text
    finally:
        model.close()
    assert not model.healthy  # closed: its threads are gone


@MODES
def test_a_run_past_its_deadline_fails_and_its_runtime_comes_back(max_batch_size, good, poisoned):
    model = serve(partial_faulty("slow"), max_batch_size)
    try:
        with pytest.raises(DeadlineExceeded):
            asyncio.run(model.infer(poisoned.tolist(), deadline=time.monotonic() + 0.05))
        assert eventually(lambda: settled(model))  # after the slow call finished in the background
        assert model.replaced_runtimes == 0
        assert model.healthy
        assert_serves(model, good)
    finally:
        model.close()


def test_a_worker_that_cannot_be_replaced_makes_the_model_unhealthy(poisoned):
    model = serve(partial_faulty("exit"), 1)
    try:
        threads = model.executor._threads  # type: ignore[attr-defined]
        threads._initializer = failing_initializer  # the replacement fails to start
        with pytest.raises(WorkerDied):
            asyncio.run(model.infer(poisoned.tolist()))
        assert eventually(lambda: not model.healthy)
        assert model.live_workers == 1
        assert model.worker_threads == 2
    finally:
        model.close()


def failing_initializer() -> None:
    raise RuntimeError("cannot initialise (on purpose)")


def test_thread_set_replaces_a_thread_whose_loop_raises():
    jobs: list[threading.Event] = [threading.Event() for _ in range(2)]
    crashes = iter([ValueError("escaped the loop"), None])

    def work() -> None:
        crash = next(crashes)
        if crash is not None:
            raise crash
        jobs[0].wait(5)  # the replacement parks until told to stop

    threads = ThreadSet(1, "test-set", work)
    threads.wait_started(5)
    assert eventually(lambda: threads.replaced == 1)
    assert threads.alive == 1
    threads.closing = True
    jobs[0].set()
    threads.join(5)
    assert threads.alive == 0


def partial_faulty(mode: str) -> Callable[[], ModelSpec]:
    return lambda: faulty(mode)


@pytest.fixture(autouse=True)
def _no_threads_left_behind() -> Iterator[None]:
    before = threading.active_count()
    yield
    assert eventually(lambda: threading.active_count() <= before, timeout=5), threading.enumerate()
