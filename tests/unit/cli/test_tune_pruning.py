"""`inferpool tune`'s pruning never drops batching on a cost that cannot justify it: the costs
measured for the digits model in the 10-minute run (docs/BENCHMARKS.md), where one noisy cell
(batch 2 slower than batch 4) cut every 2-process batching setting out of the search."""

from __future__ import annotations

import pytest

from inferpool.cli.tune.costs import Costs
from inferpool.cli.tune.space import Knobs, Load, build_space, process_counts, useful_batches

DIGITS_64 = Load(p99_seconds=0.02, concurrency=64)
DEFAULTS_AS_SERVED = Knobs("onnxruntime", 2, 1, 1, "inline")  # auto's choices on that machine

# /tmp/tune10-digits/trials.json "costs_us": median µs per call by backend, intra-op threads, batch.
DIGITS_COSTS_US = {
    ("eager", 1): [210.2, 665.0, 701.8, 494.8, 933.5, 1334.9, 2045.2],
    ("onnxruntime", 1): [31.4, 82.2, 52.3, 112.3, 185.4, 335.4, 529.3],
    ("onnxruntime", 2): [32.0, 35.1, 82.0, 108.8, 149.1, 232.7, 392.4],
    ("static", 1): [126.8, 507.8, 308.9, 531.7, 714.5, 1027.9, 1628.2],
}


def digits_costs() -> Costs:
    costs = Costs(cpus=2, batched=True, gil_share={"eager": 1.0, "static": 1.0, "onnxruntime": 1.0})
    for (backend, threads), calls in DIGITS_COSTS_US.items():
        for size, call_us in zip([1, 2, 4, 8, 16, 32, 64], calls, strict=True):
            costs.calls[backend, threads, size] = call_us * 1e-6
    return costs


def test_the_digits_run_keeps_batching_for_every_process_count():
    space = build_space(digits_costs(), DIGITS_64, models=1, oversubscribe=False, skip=DEFAULTS_AS_SERVED)
    knobs = [c.knobs for c in space.candidates]
    for workers in process_counts(2):
        batching = [k for k in knobs if k.workers == workers and k.max_batch_size > 1]
        assert batching, f"no batching setting with {workers} processes"
        assert all(k.max_batch_size <= 64 // workers for k in batching)  # only sizes its clients can fill
    # The family the run lost: 2 processes, 1 intra-op thread each (2 threads would not fit 2 CPUs).
    assert any(k.workers == 2 and k.intra_op_threads == 1 and k.max_batch_size > 1 for k in knobs)
    assert all(k.workers * k.intra_op_threads <= 2 for k in knobs)


def test_a_smaller_batch_costs_no_more_than_a_larger_one_measured():
    costs = digits_costs()
    assert costs.call("onnxruntime", 1, 2) == pytest.approx(52.3e-6)  # timed 82.2 µs, batch 4 52.3 µs
    assert costs.call("onnxruntime", 1, 4) == pytest.approx(52.3e-6)
    assert costs.call("onnxruntime", 1, 1) == pytest.approx(31.4e-6)
    assert costs.call("onnxruntime", 1, 12) == pytest.approx(112.3e-6 * 12 / 8)  # scaled from 8, under 16's
    assert "onnxruntime x1 b2: timed 82 us, more than a larger batch: taken as 52 us" in costs.disturbed()
    assert not any(line.startswith("onnxruntime x2 b1") for line in costs.disturbed())


def test_the_knee_is_the_smallest_size_near_the_lowest_per_sample_cost():
    costs = digits_costs()
    # 2 processes, 32 clients each: per sample 26.2 (b2, from b4), 13.1, 14.0, 11.6, 10.5 µs (b32);
    # 16 is the smallest within 10 % of 10.5, and half of it is tried too.
    assert useful_batches(costs, "onnxruntime", 1, DIGITS_64, limit=32) == [1, 8, 16]
    assert useful_batches(costs, "onnxruntime", 1, DIGITS_64, limit=1) == [1]


def test_batching_is_kept_even_where_its_bare_cost_saves_nothing():
    flat = Costs(cpus=2, batched=True, gil_share={"m": 1.0})
    for size in (1, 2, 4, 8):
        flat.calls["m", 1, size] = size * 100e-6  # the same per sample at every size
    assert useful_batches(flat, "m", 1, DIGITS_64, limit=8) == [1, 2]
    space = build_space(flat, DIGITS_64, models=1, oversubscribe=False, skip=None)
    for workers in process_counts(2):
        assert any(c.knobs.workers == workers and c.knobs.max_batch_size > 1 for c in space.candidates)


def test_no_batch_whose_call_does_not_fit_a_quarter_of_the_objective():
    slow = Costs(cpus=2, batched=True, gil_share={"m": 1.0})
    for size in (1, 2, 4, 8):
        slow.calls["m", 1, size] = 2e-3 * size**0.5  # 2 ms alone, 5.7 ms at 8
    tight = Load(p99_seconds=0.012, concurrency=64)  # a quarter: 3 ms, so 2 fits (2.8 ms) and 4 (4 ms) does not
    assert useful_batches(slow, "m", 1, tight, limit=32) == [1, 2]
    assert useful_batches(slow, "m", 1, Load(p99_seconds=0.004, concurrency=64), limit=32) == [1]


def test_a_model_that_cannot_batch_gets_no_batch_size():
    single = Costs(cpus=2, batched=False, gil_share={"m": 1.0})
    single.calls["m", 1, 1] = 100e-6
    assert useful_batches(single, "m", 1, DIGITS_64, limit=32) == [1]
