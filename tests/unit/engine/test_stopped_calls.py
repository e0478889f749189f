"""A model call whose callers all stopped waiting stops midway on onnxruntime: the runtime is
free at once for the next request, nothing is logged as a model failure, and the stop is
counted. A real onnxruntime session on a ~0.3 s model (tests.support.slow_model.long_calls)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import numpy as np
import pytest

from inferpool.engine import DeadlineExceeded, RuntimeOptions, ServedModel
from inferpool.engine.serving.requests import Prediction

ONE = [[1.0] * 8]
SETTINGS: dict[str, Any] = {
    "backend": "onnxruntime", "num_runtimes": 1, "warmup_iters": 1, "lend_idle_cores": "off",
    "intra_op_threads": 1,
}  # fmt: skip
DISPATCH: dict[str, dict[str, Any]] = {
    "threads": {"dispatch": "threads", "max_batch_size": 1},  # a call of its own (0 would batch it)
    "batch": {"max_batch_size": 4, "max_queue_delay_us": 1000},
}


@pytest.fixture(scope="module", params=sorted(DISPATCH))
def model(request):
    options = RuntimeOptions(**SETTINGS, **DISPATCH[request.param])
    served = ServedModel.load("tests.support.slow_model:long_calls", options)
    yield served
    served.close()


def settled(model: ServedModel, stopped: int, seconds: float) -> tuple[int, int]:
    """(busy runtimes, stopped calls) once no runtime is busy and ``stopped`` calls were
    stopped, or after ``seconds`` (the lease goes back a moment before the stop is counted)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stats = model.stats()
        if stats.busy_runtimes == 0 and stats.stopped_calls >= stopped:
            break
        time.sleep(0.005)
    stats = model.stats()
    return stats.busy_runtimes, stats.stopped_calls


def test_a_call_past_its_deadline_stops_and_frees_its_runtime(model, caplog):
    started = time.monotonic()
    asyncio.run(model.infer(ONE, None))
    call = time.monotonic() - started
    stopped_before = model.stats().stopped_calls
    with caplog.at_level(logging.WARNING), pytest.raises(DeadlineExceeded, match="while model 'chain' ran it"):
        asyncio.run(model.infer(ONE, time.monotonic() + call / 6))
    # Run to its end, the call would hold the runtime for most of a call more; stopped, it
    # lets go within an operator or two (~12 ms each).
    assert settled(model, stopped_before + 1, call / 3) == (0, stopped_before + 1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    answered = asyncio.run(model.infer(ONE, None))
    np.testing.assert_array_equal(answered.outputs["y"], [[1.0] * 4])  # the runtime serves on
    assert model.stats().stopped_calls == stopped_before + 1


def test_a_call_whose_caller_is_still_waiting_is_never_stopped(model):
    stopped_before = model.stats().stopped_calls

    async def two_callers() -> list[object]:
        calls = [asyncio.ensure_future(model.infer(ONE, None)) for _ in range(2)]
        return await asyncio.gather(*calls)

    answers = asyncio.run(two_callers())
    assert len(answers) == 2
    assert model.stats().stopped_calls == stopped_before


def test_a_batch_whose_other_caller_still_waits_runs_on():
    options = RuntimeOptions(**SETTINGS, max_batch_size=2, max_queue_delay_us=300_000, wait_for_company="on")
    model = ServedModel.load("tests.support.slow_model:long_calls", options)

    async def one_leaves() -> tuple[Prediction, tuple[Prediction | BaseException]]:
        staying = asyncio.ensure_future(model.infer(ONE, None))
        leaving = asyncio.ensure_future(model.infer(ONE, None))
        while model.stats().busy_runtimes == 0:  # both in one batch of 2, which starts at once
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.03)
        leaving.cancel()
        return await staying, await asyncio.gather(leaving, return_exceptions=True)

    try:
        stayed, (left,) = asyncio.run(one_leaves())
        assert isinstance(left, asyncio.CancelledError)
        assert stayed.batch_size == 2  # they shared the call that one of them left
        np.testing.assert_array_equal(stayed.outputs["y"], [[1.0] * 4])
        assert model.stats().stopped_calls == 0
    finally:
        model.close()
