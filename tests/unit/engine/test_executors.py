"""Every executor (inline, worker threads, batcher) runs the same pipeline: success, a model
that raises, deadlines while queued and while running, shutdown with work queued."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import numpy as np
import pytest

from inferpool.engine import (
    DeadlineExceeded,
    InferenceModule,
    ModelFailed,
    NotReady,
    RuntimeOptions,
    ServedModel,
    WorkerDied,
)
from inferpool.engine.executors import EXECUTORS, ExecutorConfig
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.serving.requests import Work, request_id
from tests.support.fault_models import POISON, raising
from tests.support.pipelines import Recorded, fake_pipeline

ALL = ["inline", "threads", "batch"]
OFF_THE_LOOP = ["threads", "batch"]


class FakeModel:
    """Doubles its input; raises on a negative value; waits for ``gate`` before each call."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.admission = Recorded()
        self.released = self.admission.released
        self.calls = 0

    def run(self, arrays):
        self.gate.wait(5)
        self.calls += 1
        if (arrays["x"] < 0).any():
            raise ModelFailed("negative input (on purpose)")
        if (arrays["x"] == 99).any():
            raise SystemExit("the model exits (on purpose)")
        return {"y": arrays["x"] * 2}


@pytest.fixture
def fake() -> FakeModel:
    return FakeModel()


def executor(kind: str, fake: FakeModel):
    pipeline = fake_pipeline(fake.run, fake.admission)
    config = ExecutorConfig(
        name=f"test-{kind}", threads=1, initializer=lambda: None, max_batch_size=4 if kind == "batch" else 1,
        max_delay=0.001, call_seconds=lambda rows: 0.0,
    )  # fmt: skip
    return EXECUTORS[kind](pipeline, config)


@pytest.mark.parametrize("kind", ALL)
def test_success_answers_with_the_models_outputs_and_releases_once(kind, fake):
    ex = executor(kind, fake)
    try:
        prediction = asyncio.run(ex.run(Work([[1], [2]], 2, None)))
    finally:
        ex.close()
    np.testing.assert_array_equal(prediction.outputs["y"], [[2], [4]])
    assert prediction.batch_size == 2
    assert fake.released == [2]
    assert ex.count == (0 if kind == "inline" else 1)


@pytest.mark.parametrize("kind", ALL)
def test_a_model_that_raises_fails_the_request_and_the_executor_keeps_serving(kind, fake):
    ex = executor(kind, fake)

    async def two():
        with pytest.raises(ModelFailed, match="negative"):
            await ex.run(Work([[-1]], 1, None))
        return await ex.run(Work([[3]], 1, None))

    try:
        prediction = asyncio.run(two())
    finally:
        ex.close()
    np.testing.assert_array_equal(prediction.outputs["y"], [[6]])
    assert fake.released == [1, 1]


@pytest.mark.parametrize("kind", ALL)
def test_a_model_that_exits_answers_worker_died_and_the_executor_keeps_serving(kind, fake):
    ex = executor(kind, fake)

    async def two():
        with pytest.raises(WorkerDied):
            await ex.run(Work([[99]], 1, None))
        return await ex.run(Work([[1]], 1, None))

    try:
        prediction = asyncio.run(two())
        assert ex.alive == ex.count  # a dead worker thread was replaced
    finally:
        ex.close()
    np.testing.assert_array_equal(prediction.outputs["y"], [[2]])


def test_inline_refuses_a_request_whose_deadline_already_passed(fake):
    ex = executor("inline", fake)
    with pytest.raises(DeadlineExceeded, match="never ran"):
        asyncio.run(ex.run(Work([[1]], 1, time.monotonic() - 0.001)))
    assert fake.calls == 0
    assert fake.released == [1]


@pytest.mark.parametrize("kind", OFF_THE_LOOP)
def test_a_deadline_that_passes_while_queued_never_runs(kind, fake):
    ex = executor(kind, fake)

    async def scenario():
        fake.gate.clear()
        first = asyncio.ensure_future(ex.run(Work([[1]], 1, None)))
        await asyncio.sleep(0.05)  # the only worker is now inside the first call
        late = asyncio.ensure_future(ex.run(Work([[2]], 1, time.monotonic() + 0.05)))
        await asyncio.sleep(0.15)
        fake.gate.set()
        return await first, *(await asyncio.gather(late, return_exceptions=True))

    try:
        first, late = asyncio.run(scenario())
    finally:
        ex.close()
    np.testing.assert_array_equal(first.outputs["y"], [[2]])
    assert isinstance(late, DeadlineExceeded), late
    assert "never ran" in str(late)
    assert fake.calls == 1
    assert sorted(fake.released) == [1, 1]


@pytest.mark.parametrize("kind", OFF_THE_LOOP)
def test_shutdown_answers_queued_work_instead_of_leaving_callers_hanging(kind, fake):
    ex = executor(kind, fake)

    async def scenario():
        fake.gate.clear()
        running = asyncio.ensure_future(ex.run(Work([[1]], 1, None)))
        await asyncio.sleep(0.05)
        queued = [asyncio.ensure_future(ex.run(Work([[i]], 1, None))) for i in range(2, 5)]
        await asyncio.sleep(0.01)
        # The worker is stuck in a call past close()'s timeout: the queue is refused, not lost.
        await asyncio.get_running_loop().run_in_executor(None, lambda: ex.close(timeout=0.1))
        fake.gate.set()
        return await asyncio.wait_for(asyncio.gather(running, *queued, return_exceptions=True), 5)

    running, *queued = asyncio.run(scenario())
    np.testing.assert_array_equal(running.outputs["y"], [[2]])
    assert all(isinstance(q, NotReady) for q in queued), queued
    assert len(fake.released) == 4
    deadline = time.monotonic() + 5  # the thread that was stuck in its call still stops
    while ex.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ex.alive == 0


def served(module, dispatch: str, **options) -> ServedModel:
    options = {"num_runtimes": 1, "warmup_iters": 1, "backend": "eager", **options}
    if dispatch == "batch":
        options |= {"max_batch_size": 4, "max_queue_delay_us": 1000}
    else:
        options["dispatch"] = dispatch
    return ServedModel(module, RuntimeOptions(**options), ThreadPlan(cpus=2, runtimes=1, intra_op_threads=1), 8)


@pytest.mark.parametrize("dispatch", OFF_THE_LOOP)
def test_a_deadline_that_passes_while_running_answers_504_and_the_work_is_released(dispatch, digits_module, images):
    model = served(digits_module, dispatch)
    original, started = model.runtimes.run, threading.Event()

    def slow(arrays):
        started.set()
        time.sleep(0.2)
        return original(arrays)

    model.runtimes.run = slow  # type: ignore[method-assign]
    try:
        with pytest.raises(DeadlineExceeded, match="while model 'digits' ran it"):
            asyncio.run(model.infer(images[0].tolist(), time.monotonic() + 0.05))
        assert started.is_set()
        deadline = time.monotonic() + 2
        while model.admission.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert model.admission.requests == 0
    finally:
        model.close()


def test_inline_cannot_interrupt_a_running_call_but_a_late_answer_is_a_504_too(digits_module, images):
    # On the event loop nothing else runs until the call returns, so no timer can fire
    # mid-call; the deadline is checked when it returns, as the other executors' timers do.
    model = served(digits_module, "inline")
    original = model.runtimes.run

    def slow(arrays):
        time.sleep(0.1)
        return original(arrays)

    model.runtimes.run = slow  # type: ignore[method-assign]
    try:
        with pytest.raises(DeadlineExceeded, match="while model 'digits' ran it"):
            asyncio.run(model.infer(images[0].tolist(), time.monotonic() + 0.05))
        assert model.admission.requests == 0
        assert asyncio.run(model.infer(images[0].tolist(), time.monotonic() + 5)).outputs["label"].shape == ()
    finally:
        model.close()


class _Ids(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), request_id.get()))


@pytest.mark.parametrize("dispatch", ALL)
def test_a_failing_request_logs_its_request_id_on_every_path(dispatch):
    model = served(InferenceModule.from_spec(raising()), dispatch)
    poisoned = np.zeros((1, 8, 8), dtype=np.float32)
    poisoned[0, 0, 0] = POISON
    ids = _Ids()
    logger = logging.getLogger("inferpool.engine")
    logger.addHandler(ids)
    try:
        with pytest.raises(ModelFailed):
            asyncio.run(model.infer(poisoned.tolist(), None, "rid-7f3a"))
    finally:
        logger.removeHandler(ids)
        model.close()
    failures = [rid for message, rid in ids.seen if "failed on a request" in message]
    assert failures, ids.seen
    assert all("rid-7f3a" in rid for rid in failures), ids.seen
