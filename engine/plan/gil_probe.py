"""What a model's call costs the other threads of the process: the GIL time it holds
(``measure_gil_hold``) and what handing a job to a worker thread and back costs
(``measure_handoff``). inferpool.engine.plan.dispatch_choice turns both into inline vs worker threads.
"""

from __future__ import annotations

import asyncio
import importlib
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from queue import SimpleQueue

PROBE_SWITCH_INTERVAL = 1e-4
"""sys.setswitchinterval while measuring: a call that gives the GIL away waits up to one
interval to get it back from the competing thread; at CPython's 5 ms a 0.3 s budget would
see a few dozen such calls, at 0.1 ms thousands. Restored afterwards."""
ROUNDS = 8
CHUNK = 200  # spinner loop iterations between progress updates (a few µs)


@dataclass(frozen=True)
class GilProfile:
    """One call, measured: its uncontended median time and the GIL time it holds."""

    call_us: float
    hold_us: float
    """GIL µs per call: how long a thread spinning in Python was held back, per call. That is
    the GIL held, plus the GIL's hand-overs each time the call releases and re-takes it (tens
    of µs on a busy machine): both are time the event loop would lose to a worker thread."""
    calls: int
    """Calls made while competing with that thread (the evidence behind ``hold_us``)."""
    noise: float
    """|hold of even rounds - hold of odd rounds| / call time: how far to trust the share."""

    @property
    def gil_share(self) -> float:
        return min(1.0, max(0.0, self.hold_us / self.call_us)) if self.call_us > 0 else 1.0

    @property
    def free_us(self) -> float:
        """The call's GIL-free part: what a worker thread could overlap with the event loop."""
        return self.call_us * (1.0 - self.gil_share)


def measure_gil_hold(call: Callable[[], object], seconds: float = 0.3) -> GilProfile:
    """Time ``call`` alone, then against a thread spinning in Python: the spinner is held
    back while the call holds the GIL. Its progress rate with the call, over its rate alone,
    gives the share of the time the call held the GIL; times that time over the calls made,
    the GIL µs per call. Absolute µs per call (not the contended call's share) keep the answer
    right when contention slows the call down.

    A call that gives the GIL away and takes it back also makes the spinner wait while the
    GIL changes hands (tens of µs; on a machine with more runnable threads than CPUs, a wait
    for the scheduler): that counts as held, since the event loop would wait the same. Rounds
    interleave the windows so load from other processes hits them alike. A call that keeps a
    CPU busy without the GIL (ONNX Runtime, numpy) competes with the spinner for a CPU too,
    which reads as GIL when the CPUs are busy: it could not run beside the event loop then
    either. On 1 CPU that is always so; inferpool.engine.plan.dispatch_choice does not measure there (no GIL
    share changes the choice)."""
    for _ in range(3):
        call()
    window = max(seconds / (3 * ROUNDS), 2e-6 * median_call_us(call, 3))
    windows: dict[str, Callable[[], object]] = {
        "solo": lambda: time.sleep(window),
        "call": lambda: len(_timed_calls(call, window)),
    }
    spinner = _Spinner()
    previous = sys.getswitchinterval()
    sys.setswitchinterval(PROBE_SWITCH_INTERVAL)
    durations: list[float] = []
    rounds: list[dict[str, tuple[float, int, int]]] = []
    try:
        for i in range(ROUNDS):
            durations += _timed_calls(call, window)
            # Alternating the order of the windows cancels a drift in the machine's load.
            order = sorted(windows, reverse=i % 2 == 1)
            with spinner:
                rounds.append({name: spinner.progress_while(windows[name]) for name in order})
    finally:
        sys.setswitchinterval(previous)
        spinner.stop()
    call_us = statistics.median(durations) * 1e6
    halves = [_hold_us(rounds[i::2]) for i in (0, 1)]
    calls = sum(r["call"][2] for r in rounds)
    return GilProfile(call_us, _hold_us(rounds), calls, abs(halves[0] - halves[1]) / call_us)


def _hold_us(rounds: list[dict[str, tuple[float, int, int]]]) -> float:
    solo_s, solo_steps, _ = (sum(r["solo"][i] for r in rounds) for i in range(3))
    seconds, steps, calls = (sum(r["call"][i] for r in rounds) for i in range(3))
    ratio = (steps / seconds) / (solo_steps / solo_s) if solo_steps else 0.0
    return max(0.0, 1.0 - ratio) * seconds / max(1, calls) * 1e6


def _timed_calls(call: Callable[[], object], seconds: float) -> list[float]:
    clock, times = time.perf_counter, []
    end = clock() + seconds
    while True:  # at least one call, however long
        started = clock()
        call()
        finished = clock()
        times.append(finished - started)
        if finished >= end:
            return times


def median_call_us(call: Callable[[], object], repeats: int) -> float:
    return statistics.median(_timed_calls(call, 0.0)[0] for _ in range(repeats)) * 1e6


class _Spinner:
    """A thread counting chunks of a tight Python loop while entered, parked otherwise."""

    def __init__(self) -> None:
        self.steps = 0
        self._run, self._spinning, self._idle = threading.Event(), threading.Event(), threading.Event()
        self._quit = False
        self._thread = threading.Thread(target=self._main, name="gil-probe", daemon=True)
        self._thread.start()

    def __enter__(self) -> None:
        self._idle.clear()
        self._run.set()
        self._spinning.wait()

    def __exit__(self, *exc: object) -> None:
        self._run.clear()
        self._idle.wait()

    def progress_while(self, body: Callable[[], object]) -> tuple[float, int, int]:
        """(seconds, steps the spinner made meanwhile, what ``body`` returned if an int else 0)."""
        steps, started = self.steps, time.perf_counter()
        result = body()
        return time.perf_counter() - started, self.steps - steps, result if isinstance(result, int) else 0

    def stop(self) -> None:
        self._quit = True
        self._run.set()
        self._thread.join()

    def _main(self) -> None:
        while self._run.wait() and not self._quit:
            self._spinning.set()
            while self._run.is_set():
                for _ in range(CHUNK):
                    pass
                self.steps += 1
            self._spinning.clear()
            self._idle.set()


def measure_handoff(seconds: float = 0.05) -> float:
    """Median µs of one no-op job's round trip as the ``threads`` executor makes it: event loop
    -> ``SimpleQueue.put`` -> worker thread -> ``call_soon_threadsafe`` -> event loop. Runs on
    a loop of its own in a thread of its own (the caller may be on a running loop), uvloop
    when installed, as uvicorn's default picks it."""
    result: list[float] = []

    def probe() -> None:
        loop = _new_loop()
        try:
            result.append(loop.run_until_complete(_round_trips(seconds)))
        finally:
            loop.close()

    thread = threading.Thread(target=probe, name="handoff-probe-loop")
    thread.start()
    thread.join()
    return result[0]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        loop: asyncio.AbstractEventLoop = importlib.import_module("uvloop").new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    return loop


async def _round_trips(seconds: float) -> float:
    loop = asyncio.get_running_loop()
    jobs: SimpleQueue[asyncio.Future[None] | None] = SimpleQueue()

    def worker() -> None:
        while (done := jobs.get()) is not None:
            loop.call_soon_threadsafe(done.set_result, None)

    thread = threading.Thread(target=worker, name="handoff-probe", daemon=True)
    thread.start()
    times: list[float] = []
    try:
        end = time.perf_counter() + seconds
        while not times or time.perf_counter() < end:
            done, started = loop.create_future(), time.perf_counter()
            jobs.put(done)
            await done
            times.append(time.perf_counter() - started)
    finally:
        jobs.put(None)
        thread.join()
    return statistics.median(times) * 1e6
