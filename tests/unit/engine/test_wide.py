"""The wide lane: chosen by what the example call measures, taken only by a call alone in the pod."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

from inferpool.engine.backends.base import Runtime
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.executors.base import ExecutorConfig
from inferpool.engine.executors.threads import ThreadExecutor
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.pod_load import PodLoad
from inferpool.engine.plan.wide import (
    ON_LOOP_UNDER_SECONDS,
    QUIET_SECONDS,
    WideChoice,
    WideLane,
    build_lane_bounded,
    choose,
    lane_memory_refusal,
    usable_memory_bytes,
)
from inferpool.engine.serving.admission import Admission, ServiceTimes
from inferpool.engine.serving.pipeline import Pipeline
from inferpool.engine.serving.runtime_set import RuntimeSet
from inferpool.engine.zoo.mlp import build as build_mlp


class Sleeper(Runtime):
    """A call that sleeps ``narrow`` seconds on one thread and ``wide`` on the wide artifact."""

    narrow: ClassVar[float] = 0.005
    wide: ClassVar[float] = 0.002
    wide_artifact_supported = True

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        time.sleep(self.wide if self.compiled == "wide" else self.narrow)
        self.calls += 1
        return {"logits": np.zeros((1, 10), np.float32), "lane": self.compiled}

    @classmethod
    def wide_artifact(cls, module: InferenceModule, options: RuntimeOptions, threads: int) -> Any:
        return "wide"


@pytest.fixture(scope="module")
def module() -> InferenceModule:
    return InferenceModule.from_spec(build_mlp())


def _sleeper(narrow: float, wide: float) -> type[Sleeper]:
    return type("Fake", (Sleeper,), {"narrow": narrow, "wide": wide})


def test_a_long_call_that_scales_gets_the_lane(module):
    backend = _sleeper(0.005, 0.002)
    choice, lane = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2)
    assert choice.enabled, choice
    assert lane is not None
    assert lane.runtime.options.intra_op_threads == 2
    assert choice.narrow_ms is not None
    assert choice.wide_ms is not None
    assert choice.narrow_ms > choice.wide_ms


@pytest.mark.parametrize(
    ("narrow", "wide", "options", "cpus", "reason"),
    [
        (0.0002, 0.0001, RuntimeOptions(), 2, "under 2 ms"),  # digits-sized: threads cannot pay
        (0.005, 0.0047, RuntimeOptions(), 2, "under 1.15x"),  # long, but does not scale
        (0.03, 0.028, RuntimeOptions(), 2, "a call is "),  # compute-bound already: not probed at 8 samples
        (0.005, 0.002, RuntimeOptions(lend_idle_cores="off"), 2, "off"),
        (0.005, 0.002, RuntimeOptions(intra_op_threads=2), 4, "intra_op_threads is set"),  # explicit wins
        (0.005, 0.002, RuntimeOptions(), 1, "one usable CPU"),
    ],
)
def test_no_lane_where_it_cannot_win_or_was_not_asked_for(module, narrow, wide, options, cpus, reason):
    backend = _sleeper(narrow, wide)
    choice, lane = choose(backend, backend(module, options), module, options, cpus=cpus)
    assert not choice.enabled
    assert lane is None
    assert reason in choice.reason


def test_a_backend_without_a_wide_artifact_is_left_alone(module):
    backend = type("Plain", (Sleeper,), {"wide_artifact_supported": False})
    choice, _ = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2)
    assert not choice.enabled
    assert "builds no wide artifact" in choice.reason


def _runtime_set(module: InferenceModule, pod: PodLoad, quiet_seconds: float = 0.002) -> RuntimeSet:
    options = RuntimeOptions(warmup_iters=0)
    backend = _sleeper(0.0, 0.0)
    runtimes = RuntimeSet("fake", backend, "narrow", module, options, 1, pod)
    runtimes.wide = WideLane(backend(module, options, "wide"), quiet_seconds=quiet_seconds)
    return runtimes


def _other_process_calls(pod: PodLoad, entered: Any, done: Any) -> None:
    pod.claim(1)
    pod.enter()
    entered.set()
    done.wait(30)
    pod.leave()


def test_a_call_alone_in_the_pod_runs_wide_and_beside_another_narrow(module):
    pod = PodLoad(processes=2)
    pod.active = True
    runtimes = _runtime_set(module, pod)
    assert runtimes.run(module.example_inputs)["lane"] == "wide"
    fork = multiprocessing.get_context("fork")  # a serving process is a fork of the one that made the pod
    entered, done = fork.Event(), fork.Event()
    other = fork.Process(target=_other_process_calls, args=(pod, entered, done))
    other.start()
    try:
        assert entered.wait(30)
        assert runtimes.run(module.example_inputs)["lane"] == "narrow"  # the other process's call is running
    finally:
        done.set()
        other.join(30)
    time.sleep(0.01)  # past the lane's quiet window (2 ms)
    assert runtimes.run(module.example_inputs)["lane"] == "wide"
    assert pod.running() == 0  # every call left


def _other_process_calls_once(pod: PodLoad) -> None:
    pod.claim(1)
    pod.enter()
    pod.leave()


def test_a_call_runs_wide_only_once_no_two_calls_have_overlapped_for_a_while(module):
    """Under load another process is between calls only briefly: a call starting in that gap
    would share the cores with its next call. Calls that overlapped lately say so; calls that
    merely followed each other, in any process, do not."""
    pod = PodLoad(processes=2)
    pod.active = True
    runtimes = _runtime_set(module, pod, quiet_seconds=1.0)
    fork = multiprocessing.get_context("fork")
    assert runtimes.run(module.example_inputs)["lane"] == "wide"
    one_client_elsewhere = fork.Process(target=_other_process_calls_once, args=(pod,))
    one_client_elsewhere.start()
    one_client_elsewhere.join(30)
    assert runtimes.run(module.example_inputs)["lane"] == "wide"  # one client's calls, hopping processes
    pod.enter()  # a call of this process is running while the other process makes one
    overlapping = fork.Process(target=_other_process_calls_once, args=(pod,))
    overlapping.start()
    overlapping.join(30)
    pod.leave()
    overlapped = time.monotonic()
    assert not pod.calm(1.0)
    assert runtimes.run(module.example_inputs)["lane"] == "narrow"
    time.sleep(max(0.0, 1.05 - (time.monotonic() - overlapped)))
    assert pod.calm(1.0)
    assert runtimes.run(module.example_inputs)["lane"] == "wide"


def test_the_quiet_window_is_the_models_call_time_within_bounds():
    assert WideChoice(2, True, "", narrow_ms=9.5, wide_ms=6.0).quiet_seconds() == pytest.approx(0.0095)
    assert WideChoice(2, True, "", narrow_ms=0.5, wide_ms=0.3).quiet_seconds() == QUIET_SECONDS[0]
    assert WideChoice(2, True, "", narrow_ms=800.0, wide_ms=400.0).quiet_seconds() == QUIET_SECONDS[1]
    assert WideChoice(2, True, "", narrow_ms=9.5, wide_ms=6.0).report()["quiet_ms"] == 9.5


def test_a_chosen_lane_carries_the_quiet_window_of_its_measurement(module):
    backend = _sleeper(0.005, 0.002)
    choice, lane = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2)
    assert lane is not None
    assert lane.quiet_seconds == choice.quiet_seconds() >= 0.005


def test_an_inactive_pod_counts_nothing(module):
    pod = PodLoad()
    runtimes = _runtime_set(module, pod)
    assert runtimes.run(module.example_inputs)["lane"] == "narrow"  # no model of the pod lends
    assert pod.running() == 0


def test_a_replacement_process_resets_its_slot():
    pod = PodLoad(processes=2)
    pod.claim(0)
    pod.enter()
    pod.claim(1)
    pod.enter()  # beside slot 0's call; then the process is killed mid-call
    pod.claim(0)
    pod.claim(1)
    assert pod.running() == 0
    assert pod.calm(60.0)  # the overlap both saw is forgotten with their counts


class RowSleeper(Sleeper):
    """0.3 ms a sample narrow, half that wide: one sample is too short to gain, eight are not."""

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rows = next(iter(inputs.values())).shape[0]
        time.sleep(rows * (0.00015 if self.compiled == "wide" else 0.0003))
        return {"logits": np.zeros((rows, 10), np.float32), "lane": self.compiled}


def test_a_model_that_gains_only_on_batches_lends_only_to_batches(module):
    choice, lane = choose(RowSleeper, RowSleeper(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2)
    assert choice.enabled, choice
    assert choice.min_rows == 8
    assert lane is not None
    assert lane.try_run(module.examples(1)) is None  # one sample: narrow, as measured
    outputs = lane.try_run(module.examples(8))
    assert outputs is not None
    assert outputs["lane"] == "wide"


def test_lanes_that_would_hold_too_much_memory_are_refused(module, tmp_path):
    weights = module.num_parameters * 4
    assert lane_memory_refusal(module, processes=2, available=weights * 100) is None
    refusal = lane_memory_refusal(module, processes=2, available=weights * 10)
    assert refusal is not None
    assert "2 lanes would hold" in refusal
    (tmp_path / "memory.max").write_text("1073741824\n")
    assert usable_memory_bytes(cgroup=tmp_path) == 1 << 30
    (tmp_path / "memory.max").write_text("max\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert usable_memory_bytes(cgroup=tmp_path, meminfo=meminfo) == 2048 * 1024


def test_a_precision_the_backend_cannot_build_wide_gets_no_lane(module):
    options = RuntimeOptions(backend="openvino", precision="bf16")
    backend = _sleeper(0.005, 0.002)  # builds fp32 wide only, as Runtime's default says
    choice, lane = choose(backend, backend(module, options), module, options, cpus=2)
    assert (choice.enabled, lane) == (False, None)
    assert "in precision bf16" in choice.reason
    both = type("Both", (backend,), {"wide_precisions": ("fp32", "bf16")})
    choice, lane = choose(both, both(module, options), module, options, cpus=2)
    assert choice.enabled, choice
    assert lane is not None


class Apart(Sleeper):
    """A backend whose wide runs would break a later fork: timed by ``wide_seconds_apart`` only."""

    wide_probe_apart = True
    asked: ClassVar[list[list[int]]] = []

    @classmethod
    def wide_artifact(cls, module: InferenceModule, options: RuntimeOptions, threads: int) -> Any:
        raise AssertionError("built in the process that forks later")

    @classmethod
    def wide_seconds_apart(cls, module, options, threads, examples, repeats, timeout) -> list[tuple[float, float]]:
        cls.asked.append([next(iter(e.values())).shape[0] for e in examples])
        return [(cls.narrow, cls.wide) for _ in examples]


def test_a_process_that_forks_later_times_the_lane_apart_and_keeps_none(module):
    class Forks(Apart):
        asked: ClassVar[list[list[int]]] = []

    backend = Forks
    choice, lane = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2, forks=True)
    assert choice.enabled, choice
    assert lane is None  # the serving processes build their own (ServedModel.start)
    assert choice.wide_ms == pytest.approx(2.0)
    assert backend.asked == [[1, 8]]  # one process, every sample count choose may ask for


def test_a_lane_timed_apart_is_compared_with_narrow_calls_timed_beside_it(module):
    class Busy(Apart):
        """Narrow runs here take 5 ms (a busy moment); apart, narrow and wide both take 2 ms."""

        asked: ClassVar[list[list[int]]] = []

        @classmethod
        def wide_seconds_apart(cls, module, options, threads, examples, repeats, timeout) -> list[tuple[float, float]]:
            return [(0.002, 0.002) for _ in examples]

    choice, lane = choose(Busy, Busy(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2, forks=True)
    assert not choice.enabled, choice  # 1.00x where they ran side by side, not 2.5x across two moments
    assert choice.narrow_ms == pytest.approx(2.0)
    assert choice.wide_ms == pytest.approx(2.0)
    assert lane is None


def test_a_process_that_serves_itself_times_the_lane_here(module):
    backend = type("Here", (Apart,), {"wide_artifact": classmethod(lambda cls, m, o, t: "wide")})
    choice, lane = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2)
    assert choice.enabled, choice
    assert lane is not None
    assert lane.runtime.compiled == "wide"


def test_a_batch_gain_measured_apart_starts_one_process(module):
    class RowsApart(RowSleeper):
        wide_probe_apart = True
        asked: ClassVar[list[int]] = []

        @classmethod
        def wide_seconds_apart(cls, module, options, threads, examples, repeats, timeout) -> list[tuple[float, float]]:
            cls.asked.append(1)
            return [(r * 0.0003, r * 0.00015) for r in (next(iter(e.values())).shape[0] for e in examples)]

    backend = RowsApart
    choice, lane = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2, forks=True)
    assert (choice.enabled, choice.min_rows, lane) == (True, 8, None), choice
    assert backend.asked == [1]


def test_a_probe_that_fails_apart_costs_the_lane_not_the_model(module):
    def fails(cls, module, options, threads, examples, repeats, timeout):
        raise ModelLoadError("the probe took over 60 s")

    backend = type("Fails", (Apart,), {"wide_seconds_apart": classmethod(fails)})
    choice, lane = choose(backend, backend(module, RuntimeOptions()), module, RuntimeOptions(), cpus=2, forks=True)
    assert (choice.enabled, lane) == (False, None)
    assert "could not be measured: the probe took over 60 s" in choice.reason


def test_a_lane_that_hangs_or_fails_to_build_is_given_up_in_bounded_time(module):
    hangs = type("Hangs", (Sleeper,), {"wide_artifact": classmethod(lambda cls, m, o, t: time.sleep(5))})
    started = time.perf_counter()
    lane, why = build_lane_bounded(hangs, module, RuntimeOptions(warmup_iters=0), 2, timeout=0.2)
    assert time.perf_counter() - started < 2
    assert lane is None
    assert "took over 0.2 s" in why

    def broken(cls, m, o, t):
        raise RuntimeError("no such device")

    fails = type("Broken", (Sleeper,), {"wide_artifact": classmethod(broken)})
    lane, why = build_lane_bounded(fails, module, RuntimeOptions(warmup_iters=0), 2, timeout=5)
    assert lane is None
    assert "failed: no such device" in why
    lane, why = build_lane_bounded(Sleeper, module, RuntimeOptions(warmup_iters=0), 2, min_rows=8, timeout=5)
    assert lane is not None
    assert (lane.runtime.compiled, lane.min_rows, why) == ("wide", 8, "")


class _TimedRequest:
    """An openvino infer request stand-in whose calls sleep the next of ``seconds``."""

    def __init__(self, seconds: list[float]) -> None:
        self.seconds = iter(seconds)

    def infer(self, inputs: object, share_inputs: bool) -> None:
        time.sleep(next(self.seconds))


def test_the_apart_probe_reports_its_quietest_block(monkeypatch):
    """A neighbour that slows the wide call for a while (steal on a shared host) must not decide:
    the block where the lane gained most is the one reported."""
    from inferpool.engine.backends import openvino_probe
    from inferpool.engine.plan import calm_timing

    monkeypatch.setattr(calm_timing, "BLOCKS", 3)
    monkeypatch.setattr(calm_timing, "PAUSE_SECONDS", 0.0)
    repeats = 3
    narrow = _TimedRequest([0.0] + [0.004] * 3 * repeats)
    wide = _TimedRequest([0.0] + [0.008] * repeats + [0.002] * repeats + [0.006] * repeats)  # slowed, quiet, slowed
    narrow_seconds, wide_seconds = openvino_probe.median_pair(narrow, wide, {}, repeats)
    assert wide_seconds < 0.005  # the quiet block's (the slowed ones' calls sleep 6 and 8 ms)
    assert narrow_seconds > wide_seconds


def test_a_block_that_gains_enough_ends_the_timing(monkeypatch):
    from inferpool.engine.plan import calm_timing

    monkeypatch.setattr(calm_timing, "PAUSE_SECONDS", 0.0)
    calls = {"narrow": 0, "wide": 0}

    def count(name: str, seconds: float) -> Any:
        def call() -> None:
            calls[name] += 1
            time.sleep(seconds)

        return call

    narrow_seconds, wide_seconds = calm_timing.calmest_pair(count("narrow", 0.004), count("wide", 0.001), 3, enough=1.5)
    assert narrow_seconds > wide_seconds
    assert calls == {"narrow": 4, "wide": 4}  # the warm call and one block: it gained enough


def test_a_call_that_ends_beside_another_marks_the_overlap():
    """Two processes whose calls run in step overlap at every end; the start that overlapped may
    be older than the quiet window by then, and the next call must still not run wide."""
    pod = PodLoad(processes=2)
    fork = multiprocessing.get_context("fork")
    entered, done = fork.Event(), fork.Event()
    other = fork.Process(target=_other_process_calls, args=(pod, entered, done))
    other.start()
    try:
        assert entered.wait(30)
        pod.enter()  # beside the other's call: marked at its start
        time.sleep(0.06)
        assert pod.calm(0.05)  # the start's mark is past the window
        pod.leave()  # ends while the other still runs
        assert not pod.calm(0.05)
    finally:
        done.set()
        other.join(30)


def test_the_lane_says_whether_a_call_now_would_take_it(module):
    pod = PodLoad(processes=2)
    pod.active = True
    runtimes = _runtime_set(module, pod)
    assert runtimes.alone_on_wide_lane()
    pod.enter()  # a call of this process runs
    assert not runtimes.alone_on_wide_lane()
    pod.leave()
    assert runtimes.alone_on_wide_lane()
    assert runtimes.wide is not None
    runtimes.wide.min_rows = 8  # only batches gain: a lone request's size is not known before its decode
    assert not runtimes.alone_on_wide_lane()
    runtimes.wide.min_rows = 1
    runtimes.wide.quiet_seconds = ON_LOOP_UNDER_SECONDS  # a call this long keeps the loop to itself
    assert not runtimes.alone_on_wide_lane()
    assert not _runtime_set(module, PodLoad(processes=2)).alone_on_wide_lane()  # no model of the pod lends


class ThreadNoted(Sleeper):
    """Notes the thread each call ran on."""

    threads: ClassVar[list[int]] = []

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        return super().run(inputs)


def test_a_request_alone_on_the_wide_lane_runs_on_the_event_loop(module):
    """No hand-off to a worker thread and back for a call that has every core to itself; a
    request that would run narrow, beside another call of the pod, still goes to a worker."""
    pod = PodLoad(processes=2)
    pod.active = True
    options = RuntimeOptions(warmup_iters=0)
    backend: type[ThreadNoted] = type("Noted", (ThreadNoted,), {"narrow": 0.0, "wide": 0.0, "threads": []})
    runtimes = RuntimeSet("fake", backend, "narrow", module, options, 1, pod)
    runtimes.wide = WideLane(backend(module, options, "wide"), quiet_seconds=0.002)
    pipeline = Pipeline("fake", module.schema, runtimes, Admission(ServiceTimes(), 1, 1, capacity=8), options)
    executor = ThreadExecutor(pipeline, ExecutorConfig(name="test", threads=1, initializer=lambda: None))
    inputs = {name: array.tolist() for name, array in module.example_inputs.items()}

    async def one() -> tuple[int, str]:
        prediction = await executor.infer(inputs, None, None)
        return threading.get_ident(), str(prediction.outputs["lane"])

    try:
        loop_thread, lane = asyncio.run(one())
        assert (backend.threads[-1], lane) == (loop_thread, "wide")
        pod.claim(1)
        pod.enter()  # another process's call is running
        loop_thread, lane = asyncio.run(one())
        assert lane == "narrow"
        assert backend.threads[-1] != loop_thread
    finally:
        executor.close()
