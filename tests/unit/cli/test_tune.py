"""`inferpool tune`'s rules on made-up figures: the budget, the pruning, the choice of a winner
(never a trial that missed the objective), early stops and the config it writes."""

from __future__ import annotations

import time

import pytest

from inferpool.cli.tune.budget import EXIT_MARGIN, Budget, parse_duration
from inferpool.cli.tune.config import to_toml, write_config
from inferpool.cli.tune.costs import Costs, batch_sizes
from inferpool.cli.tune.rank import DEFAULTS, NOISE, choose
from inferpool.cli.tune.space import Knobs, Load, build_space, calibrate, predict
from inferpool.cli.tune.trials import Trial, early_stop
from inferpool.config import load_settings
from inferpool.harness.load import Summary, Window

CLOSED = Load(p99_seconds=0.02, concurrency=16)


@pytest.mark.parametrize(
    ("text", "seconds"), [("10m", 600), ("90s", 90), ("1h", 3600), ("1m30s", 90), ("75", 75), ("2.5m", 150)]
)
def test_budget_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["ten", "0", "-5s", "10x", "m", "1m 30s"])
def test_bad_budget_is_refused_with_examples(text):
    with pytest.raises(ValueError, match="budget"):
        parse_duration(text)


def test_budget_keeps_the_reserve_and_the_exit_margin():
    budget = Budget(100, start=time.monotonic(), reserve=20)
    assert budget.left() == pytest.approx(100 - EXIT_MARGIN, abs=0.5)
    assert budget.for_trials() == pytest.approx(100 - EXIT_MARGIN - 20, abs=0.5)
    assert budget.fits(70)
    assert not budget.fits(80)


def summary(rps: float, p99: float, errors: int = 0) -> Summary:
    return Summary(seconds=5.0, ok=int(rps * 5), errors=errors, throughput=rps, p50_ms=p99 / 2, p99_ms=p99)


def trial(name: str, rps: float, p99: float, load: Load = CLOSED, errors: int = 0) -> Trial:
    measured = summary(rps, p99, errors)
    return Trial(name, Knobs("eager", 1, 1, 1, "inline"), summary=measured, met=load.met_by(measured))


def chosen(trials: list[Trial], load: Load = CLOSED) -> Trial:
    choice = choose(trials, load)
    assert choice is not None
    return choice.chosen


def test_a_trial_that_missed_the_objective_is_never_chosen():
    missed_fast = trial("#1", 9000, 25.0)  # the most throughput, p99 over 20 ms
    failing = trial("#2", 8000, 5.0, errors=1)  # fast, but an error
    met = trial("#3", 2000, 19.0)
    assert chosen([trial(DEFAULTS, 1000, 30.0), missed_fast, failing, met]) is met
    assert not missed_fast.met
    assert not failing.met


def test_without_a_trial_that_met_the_closest_is_the_smallest_miss():
    trials = [trial(DEFAULTS, 1000, 30.0), trial("#1", 9000, 50.0), trial("#2", 500, 21.0)]
    best = chosen(trials)
    assert best.name == "#2"  # 21 ms is beyond the noise of 30 ms: throughput does not enter
    assert not best.met


def test_the_defaults_win_ties_within_the_noise():
    defaults = trial(DEFAULTS, 1000, 10.0)
    within = trial("#1", 1000 * (1 + NOISE * 0.9), 10.0)
    beyond = trial("#2", 1000 * (1 + NOISE * 1.1), 10.0)
    assert chosen([within, defaults]) is defaults
    assert chosen([defaults, beyond]) is beyond


def test_open_loop_prefers_the_lowest_p99_that_keeps_up():
    load = Load(p99_seconds=0.02, rate=1000)
    behind = trial("#1", 900, 2.0, load)  # answered under 95 % of the offered rate
    slow = trial("#2", 1000, 15.0, load)
    quick = trial("#3", 1000, 5.0, load)
    assert not behind.met
    assert chosen([behind, slow, quick], load) is quick


def window(latencies_ms: list[float], seconds: float, errors: int = 0) -> Window:
    now = time.perf_counter()
    return Window(start=now - seconds, latencies=[ms / 1e3 for ms in latencies_ms], errors=errors, end=now)


def test_early_stop_once_the_p99_cannot_come_under_the_objective():
    # 2 s of a 4 s trial at 200/s: 800 answers in all, so more than 10 (1 % x 1.25) over 20 ms is final.
    met = summary(100, 5.0)  # a trial that met the objective, at less throughput than these
    assert early_stop(window([5.0] * 380 + [30.0] * 20, 2.0), 4.0, CLOSED, met) == "p99 above objective"
    assert early_stop(window([5.0] * 395 + [30.0] * 5, 2.0), 4.0, CLOSED, met) == ""


def test_while_no_trial_met_a_trial_that_misses_runs_to_its_end():
    """The closest is ranked on whole trials: a quarter of one is too noisy."""
    assert early_stop(window([5.0] * 380 + [30.0] * 20, 2.0), 4.0, CLOSED, None) == ""


def test_early_stop_on_errors_and_on_a_trial_that_cannot_win():
    assert early_stop(window([5.0] * 390, 2.0, errors=10), 4.0, CLOSED, None) == "errors"
    assert early_stop(window([5.0] * 400, 2.0), 4.0, CLOSED, summary(1000, 5.0)) == "cannot win"
    assert early_stop(window([5.0] * 400, 2.0), 4.0, CLOSED, summary(210, 5.0)) == ""


def test_no_early_stop_before_a_quarter_of_the_trial_or_enough_answers():
    assert early_stop(window([30.0] * 400, 0.5), 4.0, CLOSED, None) == ""
    assert early_stop(window([30.0] * 50, 2.0), 4.0, CLOSED, None) == ""


def costs() -> Costs:
    """4 CPUs; a fast backend that releases the GIL and batches well up to 8, a slow one."""
    made = Costs(cpus=4, batched=True, gil_share={"fast": 0.1, "slow": 1.0})
    for size, call_us in {1: 1000, 2: 1100, 4: 1300, 8: 1700, 16: 3300}.items():
        made.calls["fast", 1, size] = call_us * 1e-6
        made.calls["fast", 2, size] = call_us * 0.95e-6  # a second thread saves 5 %: not worth it
        made.calls["slow", 1, size] = call_us * 3e-6
    return made


def test_pruning_drops_slow_backends_useless_threads_and_oversized_batches():
    load = Load(p99_seconds=0.05, concurrency=4)
    space = build_space(costs(), load, models=1, oversubscribe=False, skip=None)
    knobs = [c.knobs for c in space.candidates]
    assert {k.backend for k in knobs} == {"fast"}
    assert any("slow: dropped" in reason for reason in space.reasons)
    assert {k.intra_op_threads for k in knobs} == {1}
    # The knee is 8 (16 saves nothing per sample), but only 4 requests are ever outstanding.
    assert {k.max_batch_size for k in knobs} <= {1, 2, 4}
    assert all(k.workers * k.num_runtimes <= 4 for k in knobs)
    assert all(k.dispatch != "inline" or (k.num_runtimes == 1 and k.max_batch_size == 1) for k in knobs)
    assert len(knobs) < space.grid
    predicted = [c.predicted for c in space.candidates]
    assert predicted == sorted(predicted, reverse=True)
    refinements = [(index, c) for index, c in enumerate(space.candidates) if c.refines is not None]
    assert refinements  # a batch's shorter queue delay, tried only after the longer one
    for index, candidate in refinements:
        assert candidate.refines in knobs[:index]
        assert candidate.knobs.max_queue_delay_us < candidate.refines.max_queue_delay_us


def test_the_defaults_as_served_are_not_tried_again():
    load = Load(p99_seconds=0.05, concurrency=64)
    first = build_space(costs(), load, models=1, oversubscribe=False, skip=None).candidates[0].knobs
    again = build_space(costs(), load, models=1, oversubscribe=False, skip=first)
    assert first not in [c.knobs for c in again.candidates]


def test_calibration_reproduces_the_measured_rate():
    knobs = Knobs("fast", 4, 1, 1, "inline")
    http = calibrate(knobs, costs(), CLOSED, 3000.0)
    assert predict(knobs, costs(), CLOSED, http) == pytest.approx(3000.0, rel=0.01)


def test_batch_sizes_are_powers_of_two_up_to_the_limit():
    assert batch_sizes(16) == [1, 2, 4, 8, 16]
    assert batch_sizes(12) == [1, 2, 4, 8, 12]
    assert batch_sizes(1) == [1]


def test_written_config_loads_with_every_setting_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERPOOL_API_KEY", "secret-key")
    settings = load_settings(
        None,
        ["--model", "inferpool.engine.zoo.mlp:build", "--max-queue", "10", "--cors-origins", '["https://app.example.com"]',
         "--models", '[{"source": "inferpool.engine.zoo.digits:build", "name": "d", "runtime": {"backend": "eager"}}]'],
    )  # fmt: skip
    knobs = Knobs("onnxruntime", 2, 1, 1, "auto", 8, 250.0)
    path = write_config(tmp_path / "tuned.toml", settings, knobs, "tuned\nby a test")
    text = path.read_text()
    assert text.startswith("# tuned\n# by a test\n")
    assert "secret-key" not in text
    assert "api_key" not in text
    monkeypatch.delenv("INFERPOOL_API_KEY")
    loaded = load_settings(path)
    assert loaded.model == "inferpool.engine.zoo.mlp:build"
    assert loaded.workers == 2
    assert loaded.max_queue == 10
    assert loaded.cors_origins == ["https://app.example.com"]
    assert Knobs.of(loaded.runtime, loaded.workers) == knobs
    assert loaded.models[0].name == "d"
    assert loaded.models[0].runtime is not None
    assert loaded.models[0].runtime.backend == "eager"


def test_toml_strings_are_escaped():
    assert (
        to_toml({"a": 'quote " and \\ and \n', "b": [1.5, True]})
        == 'a = "quote \\" and \\\\ and \\n"\nb = [1.5, true]\n'
    )


def test_knobs_resolved_from_what_the_server_says():
    configured = Knobs("auto", 2, 0, 1, "auto")
    served = configured.resolved({"backend": "onnxruntime", "dispatch": "inline", "runtimes": 1})
    assert served == Knobs("onnxruntime", 2, 1, 1, "inline")
    assert Knobs("auto", 1, 0, 1, "auto", 8).resolved({"dispatch": "batch"}).dispatch == "auto"
