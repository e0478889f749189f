from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from inferpool.engine import InvalidInput, NotReady, Overloaded, RuntimeOptions, ServedModel
from inferpool.engine.plan.threads import ThreadPlan


@pytest.fixture
def served(digits_module, options):
    model = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    yield model
    model.close()


def test_one_sample_in_one_sample_out(served, images, reference):
    prediction = asyncio.run(served.infer(images[0].tolist()))
    probabilities, label = reference(images[:1])
    assert prediction.single
    np.testing.assert_allclose(prediction.outputs["probabilities"], probabilities[0], rtol=1e-6)
    assert prediction.outputs["label"] == label[0]
    assert prediction.compute_seconds > 0
    assert prediction.queue_seconds >= 0


def test_concurrent_requests_each_get_their_own_answer(served, images, reference):
    async def many():
        return await asyncio.gather(*(served.infer({"image": images[i : i + 2].tolist()}) for i in range(0, 16, 2)))

    predictions = asyncio.run(many())
    probabilities, label = reference(images)
    # Batches of 2 vs 16 take different kernel blocking: equal to float rounding, not bitwise.
    np.testing.assert_allclose(
        np.concatenate([p.outputs["probabilities"] for p in predictions]), probabilities, rtol=1e-4, atol=1e-6
    )
    np.testing.assert_array_equal(np.concatenate([p.outputs["label"] for p in predictions]), label)


def test_bad_input_surfaces_from_the_worker_and_the_pool_stays_whole(served):
    with pytest.raises(InvalidInput, match="input 'image'"):
        asyncio.run(served.infer([[1, 2]]))
    assert served.pool.idle == served.pool.size
    assert served.executor.alive == 2


def test_overload_is_refused_at_once_instead_of_queueing(served, images):
    gate = threading.Event()
    original = served.runtimes.run

    def slow_run(arrays):
        gate.wait(5)
        return original(arrays)

    served.runtimes.run = slow_run  # type: ignore[method-assign]

    async def flood():
        tasks = [asyncio.ensure_future(served.infer(images[0].tolist())) for _ in range(10)]
        await asyncio.sleep(0.05)  # 2 running + 8 queued: max_queue reached
        with pytest.raises(Overloaded, match="10 requests are already in flight"):
            await served.infer(images[0].tolist())
        gate.set()
        return await asyncio.gather(*tasks)

    assert len(asyncio.run(flood())) == 10


def test_closed_model_refuses_new_work(digits_module):
    model = ServedModel(
        digits_module, RuntimeOptions(warmup_iters=0), ThreadPlan(cpus=1, runtimes=1, intra_op_threads=1), max_queue=1
    )
    model.close()
    with pytest.raises(NotReady, match="shutting down"):
        asyncio.run(model.infer([[0.0] * 8] * 8))
