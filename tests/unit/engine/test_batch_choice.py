"""Batching that never loses (inferpool.engine.batch_choice): a model that cannot gain from batching
is reported and joins only queued requests; a request that already carries a batch never waits."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferpool.engine import batch_choice
from inferpool.engine.batch_choice import BatchChoice
from inferpool.engine.batching import Batcher
from inferpool.engine.requests import Work
from tests.unit.engine.test_batching import FakeModel, assert_answers_alone_at_once, serve


def test_gain_is_samples_per_second_at_a_full_batch_over_one_sample():
    fixed_cost = BatchChoice(rows=8, one_ms=1.0, full_ms=1.6)  # a small CNN: the call, not the samples
    assert fixed_cost.gain == pytest.approx(5.0)
    assert fixed_cost.waits
    per_sample = BatchChoice(rows=8, one_ms=80.0, full_ms=660.0)  # ResNet-50 on one thread
    assert per_sample.gain < batch_choice.MIN_GAIN
    assert not per_sample.waits
    report = per_sample.report()
    assert report["waits_for_company"] is False
    assert "cannot win" in report["reason"]


def test_a_model_that_cannot_gain_is_reported_and_a_lone_request_does_not_wait(digits_module, images, monkeypatch):
    monkeypatch.setattr(batch_choice, "MIN_GAIN", float("inf"))  # whatever it measures, it cannot win
    # The delay would hold a lone request for 5 s if it waited for company.
    model = serve(digits_module, runtimes=1, max_batch_size=8, max_queue_delay_us=5e6)
    try:
        selection = model.info.dispatch_selection
        assert selection is not None
        assert selection["waits_for_company"] is False
        assert selection["full_batch_rows"] == 8
        assert_answers_alone_at_once(model, images[0])
    finally:
        model.close()


def test_a_model_that_gains_waits_for_company_as_configured(digits_module, monkeypatch):
    monkeypatch.setattr(batch_choice, "MIN_GAIN", 0.0)
    model = serve(digits_module, runtimes=1, max_batch_size=8, max_queue_delay_us=3000)
    try:
        selection = model.info.dispatch_selection
        assert selection is not None
        assert selection["waits_for_company"] is True
        assert isinstance(model.executor, Batcher)
        assert model.executor.max_delay == pytest.approx(0.003)
    finally:
        model.close()


def test_a_request_that_carries_a_batch_runs_without_waiting_for_company():
    fake = FakeModel()
    batcher = fake.batcher(max_delay=5.0)  # a lone one-sample request would wait 5 s

    async def one():
        return await batcher.run(Work([[1.0], [2.0], [3.0]], 3, None))

    try:
        started = time.perf_counter()
        asyncio.run(one())
        assert time.perf_counter() - started < 1.0
        assert fake.calls == [(3, 1)]
    finally:
        batcher.close()
