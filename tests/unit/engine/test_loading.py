"""Loading a served model (inferpool.engine.plan.loading): the source read once, the choices measured
on the warm model before it takes a request, and what the executor is configured with."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from inferpool.engine import NotReady, RuntimeOptions, ServedModel
from inferpool.engine.executors.batching import Batcher
from inferpool.engine.executors.inline import InlineExecutor
from inferpool.engine.models.handlers import Handler
from inferpool.engine.models.source_kinds import DEFAULT_MODEL
from inferpool.engine.plan.loading import executor_config, read_source
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.schema import Array

EAGER: dict[str, Any] = {"backend": "eager", "warmup_iters": 1}


def test_read_source_names_the_module_plans_the_threads_and_loads_no_handler():
    read = read_source(DEFAULT_MODEL, RuntimeOptions(**EAGER), shares=2, name="digits-b", handler=None, start=False)
    assert read.module.name == "digits-b"
    assert read.handler is None
    assert read.plan.runtimes >= 1
    assert read.plan.intra_op_threads >= 1
    assert read.options.backend == "eager"


class Passing(Handler):
    """Hands the payload through as the image."""

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        return {"image": np.asarray(payload, np.float32)}, None

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        return dict(outputs)


def test_a_handler_is_loaded_from_its_reference_and_runs_on_the_inline_path(images, reference):
    read = read_source(
        DEFAULT_MODEL, RuntimeOptions(**EAGER), shares=1, name=None, handler=f"{__name__}:Passing", start=False
    )
    assert isinstance(read.handler, Passing)
    model = ServedModel(read.module, RuntimeOptions(**EAGER, dispatch="inline"), read.plan, 8, read.handler)
    try:
        found = asyncio.run(model.infer(images[:3]))
        np.testing.assert_allclose(found.outputs["probabilities"], reference(images[:3])[0], rtol=1e-5, atol=1e-6)
    finally:
        model.close()


def test_load_without_start_measures_everything_but_takes_no_request(caplog, images):
    with caplog.at_level(logging.INFO, logger="inferpool.engine.plan.loading"):
        model = ServedModel.load(DEFAULT_MODEL, RuntimeOptions(**EAGER, dispatch="inline"), start=False)
    try:
        assert any("model 'digits' ready in" in r.getMessage() for r in caplog.records)
        assert model.dispatch_mode == "inline"
        assert isinstance(model.executor, InlineExecutor)
        # The seed calls taught admission the cost of a call at batch 1 and at a full batch.
        assert model.admission.times.predict(1) > 0
        assert model.admission.times.predict(8) > 0
        assert model.deadline_floor_ms >= 1
        with pytest.raises(NotReady):
            asyncio.run(model.infer(images[0].tolist()))
        model.start()
        assert asyncio.run(model.infer(images[0].tolist())).single
    finally:
        model.close()


def test_batching_is_chosen_and_configured_from_the_options(digits_module):
    options = RuntimeOptions(**EAGER, max_batch_size=4, max_queue_delay_us=2000, wait_for_company="on")
    model = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    try:
        assert model.dispatch_mode == "batch"
        assert isinstance(model.executor, Batcher)
        config = executor_config(model.pipeline, model.module, options, model.plan, "batch", model.batch_choice)
        assert (config.name, config.threads, config.max_batch_size) == ("digits-batcher", 2, 4)
        assert config.max_delay == pytest.approx(0.002)
        assert config.call_seconds(4) == model.admission.times.predict(4)
    finally:
        model.close()
