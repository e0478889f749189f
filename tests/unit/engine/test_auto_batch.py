"""``max_batch_size = 0``: the rule on made-up figures (each condition flips it), explicit values
winning, the decision kept for a warm start, and real models: one whose long calls run on worker
threads batches, digits does not."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from inferpool.engine import RuntimeOptions, ServedModel
from inferpool.engine.options import AUTO_MAX_BATCH
from inferpool.engine.plan.auto_batch import BatchFigures, decide_batch
from inferpool.engine.plan.batch_choice import BatchChoice
from inferpool.engine.plan.batch_memory import decision_path
from inferpool.engine.plan.loading import settle_batch
from inferpool.engine.plan.threads import ThreadPlan

PLAN = ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1)
# ResNet-50 in bf16 on one thread: 14.8 ms a sample alone, 8 samples in 84 ms (1.41x).
LONG_AND_GAINING = BatchFigures(batched=True, dispatch="threads", delay_us=500.0, timed=BatchChoice(8, 14.8, 84.0))


def test_long_calls_on_threads_that_gain_batch_up_to_8():
    decision = decide_batch(LONG_AND_GAINING)
    assert (decision.size, decision.rule) == (AUTO_MAX_BATCH, "batches")
    assert decision.reason.startswith("batches up to 8: calls on worker threads of 14.8 ms")
    assert decision.figures["batch_gain"] == 1.41


@pytest.mark.parametrize(
    ("change", "rule", "says"),
    [
        ({"batched": False, "timed": None}, "unbatched", "no batch dimension"),
        ({"dispatch": "inline"}, "inline", "its calls run inline"),
        ({"timed": BatchChoice(8, 1.9, 8.0)}, "short_call", "a 1.9 ms call is short"),  # under 4 x 500 us
        ({"timed": BatchChoice(8, 14.8, 110.0)}, "no_gain", "is 1.08x the samples/s of one"),  # under 1.1x
    ],
)
def test_each_condition_turns_batching_off(change: dict[str, Any], rule: str, says: str):
    decision = decide_batch(replace(LONG_AND_GAINING, **change))
    assert (decision.size, decision.rule) == (1, rule)
    assert decision.reason.startswith("no batching: "), decision.reason
    assert says in decision.reason, decision.reason


def test_the_shortest_call_that_batches_follows_the_queue_delay():
    short = replace(LONG_AND_GAINING, timed=BatchChoice(8, 1.9, 8.0))
    assert decide_batch(short).size == 1
    assert decide_batch(replace(short, delay_us=400.0)).size == AUTO_MAX_BATCH  # 1.6 ms is enough now


class Probe:
    """The dispatch measurement, counted: an explicit batch size must not need it."""

    def __init__(self, mode: str) -> None:
        self.asked = 0
        self._mode = mode

    @property
    def mode(self) -> str:
        self.asked += 1
        return self._mode


def settle(module, options: RuntimeOptions, timed: BatchChoice | None, mode: str = "threads"):
    probe = Probe(mode)
    decision = settle_batch(module, options, PLAN, "eager fp32", timed, probe)  # type: ignore[arg-type]
    return decision, probe.asked


@pytest.mark.parametrize("size", [1, 4])
def test_an_explicit_size_wins_whatever_is_measured(digits_module, tmp_path, size):
    options = RuntimeOptions(max_batch_size=size, compile_cache_dir=str(tmp_path))
    decision, asked = settle(digits_module, options, LONG_AND_GAINING.timed)
    assert (decision.size, decision.rule, asked) == (size, "explicit", 0)
    assert decision.report()["configured"] == size
    assert not list(tmp_path.iterdir())  # nothing kept: there was nothing to decide


def test_a_warm_start_reuses_the_kept_decision(digits_module, tmp_path):
    options = RuntimeOptions(compile_cache_dir=str(tmp_path))
    first, _ = settle(digits_module, options, LONG_AND_GAINING.timed)
    assert (first.size, first.cached) == (AUTO_MAX_BATCH, False)
    # The next start's figures would say otherwise (a busy machine): the kept decision serves.
    again, asked = settle(digits_module, options, BatchChoice(8, 14.8, 118.0), mode="inline")
    assert (again.size, again.rule, again.cached, asked) == (AUTO_MAX_BATCH, "batches", True, 0)
    assert again.report()["cached"] is True
    # Anything it was measured under is part of the key: another queue delay decides afresh.
    other, _ = settle(digits_module, replace(options, max_queue_delay_us=400.0), BatchChoice(8, 14.8, 118.0))
    assert (other.size, other.rule, other.cached) == (1, "no_gain", False)


def test_a_kept_decision_that_no_rule_gives_is_decided_again(digits_module, tmp_path):
    options = RuntimeOptions(compile_cache_dir=str(tmp_path))
    path = decision_path(digits_module, options, "eager fp32", PLAN)
    assert path is not None
    path.write_text(json.dumps({"size": 3, "rule": "batches", "reason": "edited", "figures": {}}))
    decision, _ = settle(digits_module, options, LONG_AND_GAINING.timed)
    assert (decision.size, decision.cached) == (AUTO_MAX_BATCH, False)


def served(source: str, tmp_path, **options: Any) -> ServedModel:
    settings = RuntimeOptions(compile_cache_dir=str(tmp_path), precision="fp32", warmup_iters=1, **options)
    return ServedModel.load(source, settings, start=False)


def test_a_model_with_long_calls_on_threads_is_served_batching(tmp_path):
    # 20 ms a call whatever its samples (a sleep): long, on threads (it releases the GIL), and gaining.
    model = served("tests.support.slow_model:slow_calls", tmp_path, backend="eager")
    try:
        assert (model.options.max_batch_size, model.dispatch_mode) == (AUTO_MAX_BATCH, "batch")
        assert model.admission.max_batch_size == AUTO_MAX_BATCH
        assert model.info.max_batch_size == AUTO_MAX_BATCH
        assert model.info.batch_selection is not None
        assert model.info.batch_selection["rule"] == "batches"
    finally:
        model.close()


@pytest.mark.parametrize(("dispatch", "rule"), [("inline", "inline"), ("threads", "short_call")])
def test_digits_does_not_batch(tmp_path, dispatch, rule):
    model = served("inferpool.engine.zoo.digits:build", tmp_path, backend="onnxruntime", dispatch=dispatch)
    try:
        assert (model.options.max_batch_size, model.dispatch_mode) == (1, dispatch)
        assert model.info.batch_selection == model.batch_decision.report()
        assert model.batch_decision.rule == rule
    finally:
        model.close()


def test_the_decision_shows_its_figures():
    report = decide_batch(LONG_AND_GAINING).report()
    assert report | {"reason": ""} == {
        "configured": 0, "max_batch_size": 8, "rule": "batches", "reason": "", "cached": False, "batched": True,
        "dispatch": "threads", "one_sample_ms": 14.8, "batch_gain": 1.41, "full_batch_rows": 8, "min_call_ms": 2.0,
        "min_gain": 1.1,
    }  # fmt: skip
