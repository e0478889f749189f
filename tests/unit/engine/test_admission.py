from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch

from inferpool.engine import (
    DeadlineExceeded,
    InferenceModule,
    ModelSpec,
    Overloaded,
    PredictedWaitExceeded,
    RuntimeOptions,
    ServedModel,
)
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.serving.admission import ServiceTimes, count_samples
from inferpool.engine.zoo.digits import build

CALL_SECONDS = 0.03
BATCHING = {"off": {"max_batch_size": 1}, "on": {"max_batch_size": 8}}


class SlowDigits(torch.nn.Module):
    """The digits CNN taking CALL_SECONDS per call (sleeping, so the GIL stays free)."""

    def __init__(self) -> None:
        super().__init__()
        self.digits = build().module

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(CALL_SECONDS)
        return self.digits(image)


def one_runtime(module: InferenceModule, **options) -> ServedModel:
    options = {"backend": "eager", "dispatch": "threads", "num_runtimes": 1, "warmup_iters": 0, **options}
    return ServedModel(module, RuntimeOptions(**options), ThreadPlan(cpus=2, runtimes=1, intra_op_threads=1), 8)


class Gate:
    """Wraps the runtime's run: records every batch it is given; blocks until opened."""

    def __init__(self, model: ServedModel) -> None:
        self.opened = threading.Event()
        self.seen: list[np.ndarray] = []
        (runtime,) = model.pool.runtimes
        original = runtime.run

        def run(arrays):
            self.seen.append(arrays["image"].copy())
            self.opened.wait(5)
            return original(arrays)

        runtime.run = run  # type: ignore[method-assign]


@pytest.fixture(params=list(BATCHING))
def gated(request, digits_module):
    model = one_runtime(digits_module, **BATCHING[request.param])
    yield model, Gate(model)
    model.close()


async def settled(model: ServedModel) -> None:
    """Until the workers are done with everything (they drop expired requests when they reach them)."""
    for _ in range(500):
        if model.pool.idle == model.pool.size and model.admission.requests == 0:
            return
        await asyncio.sleep(0.002)


def marked(value: float) -> list:
    return np.full((1, 8, 8), value, dtype=np.float32).tolist()


def test_queued_request_past_its_deadline_is_never_run(gated):
    model, gate = gated

    async def scenario():
        running = asyncio.ensure_future(model.infer(marked(1.0)))
        while not gate.seen:
            await asyncio.sleep(0.001)
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await model.infer(marked(2.0), deadline=started + 0.05)
        waited = time.monotonic() - started
        gate.opened.set()
        await running
        await settled(model)
        return waited

    waited = asyncio.run(scenario())
    assert 0.04 < waited < 1.0
    assert all(not (batch == 2.0).any() for batch in gate.seen)
    # The dropped request left the books; the pool is whole.
    assert model.admission.requests == 0
    assert model.pool.idle == model.pool.size


def test_running_request_past_its_deadline_raises_and_its_runtime_comes_back(gated):
    model, gate = gated

    async def scenario():
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="while model 'digits' ran it"):
            await model.infer(marked(1.0), deadline=started + 0.05)
        waited = time.monotonic() - started
        assert model.pool.idle == 0  # still running in the background
        gate.opened.set()
        await settled(model)
        return waited, await model.infer(marked(3.0), deadline=time.monotonic() + 5)

    waited, after = asyncio.run(scenario())
    assert 0.04 < waited < 1.0
    assert after.outputs["probabilities"].shape == (10,)
    assert model.pool.idle == model.pool.size


@pytest.mark.parametrize("batching", list(BATCHING))
def test_predicted_wait_refuses_at_once_only_with_work_queued(batching):
    model = one_runtime(InferenceModule.from_spec(ModelSpec(SlowDigits(), build().example_inputs, ("p", "l"))),
                        **BATCHING[batching])  # fmt: skip
    sample = marked(1.0)

    async def scenario():
        # 3 requests ahead (3 calls unbatched, 1 or 2 batched), 30 ms per call: 60-120 ms predicted.
        ahead = [asyncio.ensure_future(model.infer(sample)) for _ in range(3)]
        await asyncio.sleep(0.005)
        started = time.monotonic()
        with pytest.raises(PredictedWaitExceeded) as refused:
            await model.infer(sample, deadline=started + 0.035)
        refused_after = time.monotonic() - started
        await asyncio.gather(*ahead)
        # Queue empty: never refused on prediction, however tight the deadline.
        assert model.admission.requests == 0
        fine = await model.infer(sample, deadline=time.monotonic() + 2)
        with pytest.raises(DeadlineExceeded):
            await model.infer(sample, deadline=time.monotonic() + CALL_SECONDS / 3)
        return refused.value, refused_after, fine

    try:
        refused, refused_after, fine = asyncio.run(scenario())
    finally:
        model.close()
    assert refused_after < 0.01  # at once, well before the 35 ms deadline
    assert isinstance(refused, Overloaded)
    assert refused.reason == "predicted_wait"
    assert refused.retry_after >= CALL_SECONDS / 2
    assert fine.outputs["p"].shape == (10,)


def test_deadline_already_past_is_refused_before_queueing(digits_module):
    model = one_runtime(digits_module)
    try:
        with pytest.raises(DeadlineExceeded, match="before model 'digits' got it"):
            asyncio.run(model.infer(marked(1.0), deadline=time.monotonic() - 1))
        assert model.admission.requests == 0
    finally:
        model.close()


def test_service_times_interpolate_between_batch_sizes():
    times = ServiceTimes()
    assert times.predict(4) == 0.0
    times.observe(1, 0.001)
    times.observe(32, 0.004)
    assert times.predict(1) == pytest.approx(0.001)
    assert times.predict(16) == pytest.approx(0.001 + 15 / 31 * 0.003)
    assert times.predict(64) == pytest.approx(0.008)  # beyond the largest: its per-sample rate
    for _ in range(100):
        times.observe(1, 0.002)  # the estimate follows a slowdown
    assert times.predict(1) == pytest.approx(0.002, rel=1e-3)


def test_count_samples_reads_the_batch_size_cheaply(digits_module):
    schema = digits_module.schema
    one = np.zeros((1, 8, 8)).tolist()
    assert count_samples(schema, one) == 1
    assert count_samples(schema, [one] * 5) == 5
    assert count_samples(schema, {"image": np.zeros((3, 1, 8, 8))}) == 3
    assert count_samples(schema, "nonsense") == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_batch_size": -2}, "max_batch_size=-2 is invalid: use 0 to let start-up choose"),
        ({"max_queue_delay_us": -1}, "max_queue_delay_us=-1.0 is invalid: use a non-negative"),
        ({"max_batch_size": 4, "preferred_batch_sizes": (8,)}, "use sizes between 1 and max_batch_size (4)"),
        ({"max_batch_size": 4, "dispatch": "inline"}, "batching runs on worker threads"),
    ],
)
def test_batching_options_say_how_to_fix(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RuntimeOptions(**options)
