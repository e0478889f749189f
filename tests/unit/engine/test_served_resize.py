"""A loaded model's pool re-sized before it starts (what a supervisor does when its model set
changes): runtimes dropped or built on the shared module, and the model serves with the new count."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from inferpool.engine import ServedModel
from inferpool.engine.plan.threads import ThreadPlan


def test_a_pool_shrinks_and_grows_before_start(digits_module, options, images, reference):
    model = ServedModel(digits_module, options, ThreadPlan(cpus=4, runtimes=4, intra_op_threads=1), 8, start=False)
    first = model.pool.runtimes[0]
    model.resize(ThreadPlan(cpus=1, runtimes=1, intra_op_threads=1))
    assert (model.pool.size, model.capacity, model.admission.runtimes) == (1, 1 + 8, 1)
    assert model.pool.runtimes[0] is first  # kept, not rebuilt
    model.resize(ThreadPlan(cpus=3, runtimes=3, intra_op_threads=1))
    assert (model.pool.size, model.info.runtimes, model.info.usable_cpus) == (3, 3, 3)
    model.start()
    try:
        assert model.worker_threads in (0, 3)  # inline, or one worker per runtime
        prediction = asyncio.run(model.infer(images[0].tolist()))
        np.testing.assert_allclose(prediction.outputs["probabilities"], reference(images[:1])[0][0], rtol=1e-5)
        with pytest.raises(RuntimeError, match="only a model not started yet can be resized"):
            model.resize(ThreadPlan(cpus=1, runtimes=1, intra_op_threads=1))
    finally:
        model.close()
