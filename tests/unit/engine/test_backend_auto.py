from __future__ import annotations

import asyncio
import json
import math
import time
import warnings
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pytest
from pydantic import ValidationError

from inferpool.engine import BACKENDS, ConfigError, InferenceModule, ModelLoadError, RuntimeOptions, ServedModel
from inferpool.engine.backends import AUTO
from inferpool.engine.backends.autoselect import BackendChoice, resolve_backend
from inferpool.engine.backends.eager import EagerRuntime
from inferpool.engine.models.module import InferenceModule as Module
from inferpool.engine.options import AUTO_CANDIDATES
from inferpool.engine.options import RuntimeOptions as Options
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.schema import Array

COMPILES: Counter[str] = Counter()


class Refuses(EagerRuntime):
    """A backend that cannot take the model, as a real one says so."""

    @classmethod
    def compile(cls, module: Module, options: Options) -> object:
        raise ModelLoadError("backend 'refuses' cannot export this model")


class WrongAnswers(EagerRuntime):
    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        return {name: out + 1 for name, out in super().run(inputs).items()}


class Slow(EagerRuntime):
    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        time.sleep(0.001)
        return super().run(inputs)


class QuickAlone(EagerRuntime):
    """Fast at batch 1, slow per sample in a batch: what a mean of the two would choose."""

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        if next(iter(inputs.values())).shape[0] > 1:
            time.sleep(0.004)
        return super().run(inputs)


class QuickInBatches(EagerRuntime):
    """Slow at batch 1, as fast as eager per sample in a batch."""

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        if next(iter(inputs.values())).shape[0] == 1:
            time.sleep(0.004)
        return super().run(inputs)


class Counted(EagerRuntime):
    """Counts its compiles and hands out a distinct artifact per compile, to follow it."""

    @classmethod
    def compile(cls, module: Module, options: Options) -> object:
        COMPILES[cls.__name__] += 1
        return (cls.__name__, COMPILES[cls.__name__])


class CountedToo(Counted):
    pass


class LongCalls(EagerRuntime):
    """Every call long (a round is one call) and slower than eager's: counted, to see it stopped."""

    runs = 0

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        type(self).runs += 1
        time.sleep(0.03)
        return super().run(inputs)


class EagerKernels(Counted):
    """Runs eager's kernels (as static does): compiled only where dispatch can matter."""

    eager_kernels = True


class LongEager(Counted):
    """Stands in for eager on a compute-bound model: a batch-1 call past KERNEL_BOUND_S."""

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        time.sleep(0.03)
        return super().run(inputs)


class Warns(EagerRuntime):
    @classmethod
    def compile(cls, module: Module, options: Options) -> object:
        warnings.warn("compiled by a backend that warns", UserWarning, stacklevel=2)
        return None


@pytest.fixture
def fakes(monkeypatch):
    for name, backend in {
        "refuses": Refuses,
        "wrong": WrongAnswers,
        "slow": Slow,
        "counted": Counted,
        "counted_too": CountedToo,
        "warns": Warns,
        "quick_alone": QuickAlone,
        "quick_in_batches": QuickInBatches,
        "long_calls": LongCalls,
        "eager_kernels": EagerKernels,
    }.items():
        monkeypatch.setitem(BACKENDS, name, backend)
    COMPILES.clear()


def auto(*names: str, **more: object) -> RuntimeOptions:
    # dispatch and precision are set: these tests are about the backend (engine/plan/dispatch_choice.py
    # and engine/backends/precision_auto.py have their own).
    more = {"precision": "fp32", **more}
    return RuntimeOptions(backend=AUTO, auto_backends=names, num_runtimes=2, warmup_iters=1, dispatch="threads", **more)  # type: ignore[arg-type]


def scored(choice: BackendChoice) -> dict[str, float]:
    return {t.backend: t.score_us for t in choice.trials if t.score_us is not None}


def test_picks_the_fastest_measured_and_records_why_others_were_skipped(digits_module, fakes):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = resolve_backend(digits_module, auto("eager", "refuses", "wrong", "slow", "warns"))
    rows = {t.backend: t for t in choice.trials}
    assert list(rows) == ["eager", "refuses", "wrong", "slow", "warns"]  # the table keeps the given order
    assert choice.name in BACKENDS
    assert choice.name == min(scored(choice), key=scored(choice).__getitem__)
    assert set(scored(choice)) == {"eager", "slow", "warns"}
    assert rows["refuses"].error == "ModelLoadError: backend 'refuses' cannot export this model"
    assert rows["wrong"].error is not None
    assert "disagrees with eager PyTorch" in rows["wrong"].error
    for row in (rows["eager"], rows["slow"]):
        assert row.batch_size == 8  # batching off: batch 1 and N = 8
        assert row.batch1_us is not None
        assert row.per_sample_us is not None
        assert row.score_us == pytest.approx(math.sqrt(row.batch1_us * row.per_sample_us), rel=0.01)
    # The winner's compile warnings are passed on; a loser's are not.
    assert any("backend that warns" in str(w.message) for w in caught) == (choice.name == "warns")


def test_served_model_builds_its_pool_from_the_chosen_artifact(digits_module, fakes, images, reference):
    options = auto("counted", "counted_too")
    model = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    try:
        chosen = model.selection
        assert COMPILES == {"Counted": 1, "CountedToo": 1}  # each candidate once, the winner not again
        assert chosen.compiled == (type(model.pool.runtimes[0]).__name__, 1)
        assert all(runtime.compiled is chosen.compiled for runtime in model.pool.runtimes)
        assert model.info.backend == chosen.name
        assert chosen.name in ("counted", "counted_too")
        report = json.loads(json.dumps(chosen.report()))  # JSON-ready as it is
        assert report["configured"] == AUTO
        assert report["chosen"] == chosen.name
        assert [row["backend"] for row in report["candidates"]] == ["counted", "counted_too"]
        answer = asyncio.run(model.infer({"image": images[:4].tolist()}))
    finally:
        model.close()
    np.testing.assert_allclose(answer.outputs["probabilities"], reference(images[:4])[0], rtol=1e-6)


def test_by_default_auto_times_the_quick_candidates_only(digits_module):
    """No flags: auto over eager, static and onnxruntime, which compile in about a second or
    less; aoti (tens of seconds) and torchscript (deprecated) only when listed."""
    options = RuntimeOptions(num_runtimes=2, warmup_iters=1)
    assert (options.backend, options.auto_backends) == (AUTO, ())
    assert AUTO_CANDIDATES == ("eager", "static", "onnxruntime")
    started = time.perf_counter()
    choice = resolve_backend(digits_module, options)
    seconds = time.perf_counter() - started
    assert [t.backend for t in choice.trials] == list(AUTO_CANDIDATES)
    assert all(t.error is None for t in choice.trials), choice.trials  # all three take the digits CNN
    assert choice.name == min(scored(choice), key=scored(choice).__getitem__)
    assert seconds < 60, f"auto took {seconds:.1f} s"  # a hang guard only: ~2-4 s measured


def test_a_named_backend_is_compiled_without_trials(digits_module):
    choice = resolve_backend(digits_module, RuntimeOptions(backend="eager"))
    assert (choice.name, choice.configured, choice.trials) == ("eager", "eager", ())
    assert choice.report()["candidates"] == []


def test_no_backend_can_serve_says_why_each_failed(digits_module, fakes):
    with pytest.raises(ModelLoadError, match=r"no backend can serve model 'digits' \(refuses: ModelLoadError: "):
        resolve_backend(digits_module, auto("refuses"))


def test_unknown_backend_lists_the_choices_with_auto(digits_module):
    with pytest.raises(ConfigError, match=r"'tensorrt' is unknown; choose one of \[.*'eager'.*'auto'\]"):
        resolve_backend(digits_module, RuntimeOptions(backend="tensorrt"))


@pytest.mark.parametrize("names", [("eager", "tensorrt"), ("eager", "eager"), ("auto",)])
def test_auto_backends_must_name_backends_once(names):
    with pytest.raises(ValidationError, match=r"auto_backends=.* is invalid: use names from \["):
        RuntimeOptions(backend=AUTO, auto_backends=names)


def test_unbatched_model_is_scored_by_its_call_time(fakes):
    from inferpool.engine.zoo.digits import build

    spec = build()
    module = InferenceModule.from_spec(type(spec)(spec.module, spec.example_inputs, spec.output_names, batched=False))
    choice = resolve_backend(module, auto("eager", "slow"))
    for row in choice.trials:
        assert row.batch_size is None
        assert row.per_sample_us is None
        assert row.score_us == row.batch1_us
    assert choice.name == min(scored(choice), key=scored(choice).__getitem__)


@pytest.mark.parametrize(("max_batch_size", "winner"), [(1, "quick_alone"), (4, "quick_in_batches")])
def test_with_batching_the_batch_it_forms_decides(digits_module, fakes, max_batch_size, winner):
    """Batching on: timed at batch 1 and at max_batch_size, scored by the time per sample at
    max_batch_size (what serving under load runs). Off: batch 1 and 8, geometric mean."""
    choice = resolve_backend(digits_module, auto("quick_alone", "quick_in_batches", max_batch_size=max_batch_size))
    rows = {t.backend: t for t in choice.trials}
    assert choice.name == winner
    for row in rows.values():
        assert row.batch1_us is not None
        assert row.per_sample_us is not None
        if max_batch_size > 1:
            assert row.batch_size == max_batch_size
            assert row.score_us == pytest.approx(row.per_sample_us, rel=0.01)
        else:
            assert row.batch_size == 8
            assert row.score_us == pytest.approx(math.sqrt(row.batch1_us * row.per_sample_us), rel=0.01)


def test_a_candidate_with_long_calls_is_stopped_once_it_cannot_win(digits_module, fakes):
    """Each of its calls takes longer than eager's median: its probe calls already say it
    cannot win, so it is not timed for the rounds, and the winner is the same."""
    LongCalls.runs = 0
    choice = resolve_backend(digits_module, auto("eager", "long_calls"))
    rows = {t.backend: t for t in choice.trials}
    assert choice.name == "eager"
    assert rows["long_calls"].stopped_early
    assert not rows["eager"].stopped_early
    # warm-up (1) + parity (1) + the batch-1 prior (3, the first probes) + one call at batch 8, no rounds
    assert LongCalls.runs == 6
    assert rows["long_calls"].score_us is not None


def test_eager_kernels_are_compiled_where_dispatch_can_win(digits_module, fakes):
    """digits' eager call is microseconds: its dispatch is the call, so static's kind is timed."""
    choice = resolve_backend(digits_module, auto("eager", "eager_kernels"))
    assert COMPILES["EagerKernels"] >= 1
    assert {t.backend: t.error for t in choice.trials}["eager_kernels"] is None


def test_eager_kernels_are_not_compiled_on_a_long_call_another_beats_by_far(digits_module, fakes, monkeypatch):
    """Eager's call long (the kernels are the call) and another candidate far faster: a backend
    running eager's kernels cannot win, so it is neither compiled nor timed."""
    monkeypatch.setitem(BACKENDS, "eager", LongEager)
    choice = resolve_backend(digits_module, auto("eager_kernels", "counted", "eager"))
    rows = {t.backend: t for t in choice.trials}
    assert list(rows) == ["eager_kernels", "counted", "eager"]  # the table keeps the given order
    assert COMPILES["EagerKernels"] == 0
    assert rows["eager_kernels"].error is not None
    assert "eager's kernels" in rows["eager_kernels"].error
    assert choice.name == "counted"
