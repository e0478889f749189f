"""Batching that never loses (inferpool.engine.plan.batch_choice): a model that cannot gain from batching
is reported and joins only queued requests; a request that already carries a batch never waits."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferpool.engine.executors.batching import Batcher
from inferpool.engine.plan import batch_choice
from inferpool.engine.plan.batch_choice import BatchChoice
from inferpool.engine.serving.requests import Work
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


@pytest.mark.parametrize(
    ("gain_ms", "mode", "waits"),
    [(8.0, "auto", False), (8.0, "on", True), (1.0, "auto", True), (1.0, "off", False)],
)
def test_an_explicit_wait_for_company_wins_over_the_measurement(gain_ms: float, mode: str, waits: bool) -> None:
    """8 ms for 8 samples of 1 ms each: no gain; 1 ms for 8: an 8x gain."""
    choice = BatchChoice(8, 1.0, gain_ms)
    assert choice.delay_seconds(mode, 500.0) == (500e-6 if waits else 0.0)
