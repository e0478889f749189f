"""Lending idle cores to a call that runs alone: the wide lane, and the measurement that turns it on.

The thread plan gives each runtime one intra-op thread, which is right when many requests keep
every core busy, and leaves all but one core idle when a single compute-bound request is in
flight (a ResNet-50 image, a 16-sentence MiniLM batch). So a model whose call is long and gets
faster with more threads also has a *wide* runtime: its backend's artifact built for every core
the server may use. A call takes it when it is the only one running in the whole pod
(inferpool.engine.plan.pod_load) and it is free; otherwise the call runs narrow on the pool as before,
so a loaded server never oversubscribes its cores, and the wide lane never makes a call wait.

Whether a model gets one is measured at start-up (``choose``): its example call at the plan's
thread count and at every core; the wide lane is kept only when the call is long enough for
threads to pay (``MIN_CALL_SECONDS``) and measurably faster wide (``MIN_SPEEDUP``). Explicit
settings win: ``lend_idle_cores = "off"``, or an ``intra_op_threads`` above 1, keep the plan as
configured. Backends opt in through ``Runtime.wide_artifact`` (onnxruntime: a second session
whose pool threads stop spinning when its run returns, so an idle wide lane costs no CPU;
openvino: one stream of every core, in the served precision).

Where it is measured: in the process that loads, unless that process forks the serving processes
later and the backend's threaded runs do not survive a fork (``Runtime.wide_probe_apart``:
openvino's children hung compiling their own lane after the parent had run one). Then a process
of its own times the wide artifact, bounded by ``PROBE_APART_SECONDS``, and only the forked
serving processes build a lane. A probe that fails or overruns costs the lane, never the model.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from inferpool.engine.backends.base import Runtime
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.calm_timing import calmest_pair, median_seconds
from inferpool.engine.plan.pod_load import PodLoad
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)

MIN_CALL_SECONDS = 0.002
"""Below this a call is too short for threads to pay (the digits CNN's 20 µs would only slow down)."""
MIN_SPEEDUP = 1.15
"""Narrow time / wide time needed to keep the lane: a second copy of the weights must earn its place.
Not higher: the lane costs a loaded server nothing (it waits for the pod to be quiet, pod_load),
and MiniLM's one-sentence call, 1.3x faster wide when served, measured 1.27-1.34x in the probe's
best block: a gate at 1.25 kept its lane in some starts and not others."""
MEMORY_SHARE = 0.1
"""The lanes of all serving processes together may hold at most this share of the memory the
server may use (cgroup limit, else what the kernel says is available): each is a copy of the weights."""
REPEATS = 5
BATCH_PROBE = 8
"""A batched model whose one-sample call cannot gain is measured again at this many samples: a
16-sentence request gains from threads where one sentence does not."""
PROBE_APART_SECONDS = 60.0
"""The longest a wide lane measured in a process of its own may take (``Runtime.wide_probe_apart``:
its start, compile and timed calls; MiniLM's take a few seconds): past it the model serves
without the lane, and start-up goes on."""
QUIET_SECONDS = (0.002, 0.1)
"""How long the pod must have gone without two calls at once before one alone runs wide: the
model's own narrow call time, within these bounds (inferpool.engine.plan.pod_load). Under load calls
overlap on every call; one stream of calls never does."""
ON_LOOP_UNDER_SECONDS = QUIET_SECONDS[1]
"""A call alone runs on the event loop (``WideLane.takes_any_call_now``) only for a model whose
narrow call, its quiet window, is shorter: the loop answers nothing else meanwhile (health probes,
metrics), and a longer call's hand-off to a worker thread is a smaller share of it anyway."""
LANE_BUILD_SECONDS = 60.0
"""The longest a serving process waits for its own wide lane to build before serving without it."""
PROBE_UNDER_SECONDS = 0.02
"""Only a one-sample call shorter than this is measured again at ``BATCH_PROBE`` samples: a longer
one that did not gain is compute-bound already (a ResNet-50 image, ~80 ms), and probing it cost
~7 s of a warm start (eight-sample calls, narrow and wide, five times each)."""


@dataclass(frozen=True)
class WideChoice:
    """What ``choose`` measured and decided, for the log and ``/v2/models/{name}/config``."""

    threads: int
    enabled: bool
    reason: str
    narrow_ms: float | None = None
    wide_ms: float | None = None
    min_rows: int = 1
    """Calls of fewer samples run narrow: they were measured not to gain."""

    def quiet_seconds(self) -> float:
        low, high = QUIET_SECONDS
        return low if self.narrow_ms is None else min(high, max(low, self.narrow_ms / 1e3))

    def report(self) -> dict[str, Any]:
        figures = {"narrow_ms": self.narrow_ms, "wide_ms": self.wide_ms} if self.narrow_ms is not None else {}
        return {"threads": self.threads, "enabled": self.enabled, "reason": self.reason, "min_rows": self.min_rows,
                "quiet_ms": round(self.quiet_seconds() * 1e3, 3), **figures}  # fmt: skip


class WideLane:
    """One wide runtime, taken only when free: a call never waits for it."""

    def __init__(self, runtime: Runtime, min_rows: int = 1, quiet_seconds: float = QUIET_SECONDS[0]) -> None:
        self.runtime = runtime
        self.min_rows = min_rows
        self.quiet_seconds = quiet_seconds
        """Taken only once no two calls have run at once in the pod for this long (pod_load)."""
        self._free = threading.Lock()
        self.calls = 0

    def takes_any_call_now(self, pod: PodLoad) -> bool:
        """Whether a call of any size starting now would run here, soon enough to run on the event
        loop: none runs anywhere in the pod, the pod has been calm for ``quiet_seconds``, the lane
        is free and the call short (``ON_LOOP_UNDER_SECONDS``). A reader's view, which a call
        starting elsewhere a moment later makes stale: the call then runs narrow."""
        quiet = self.quiet_seconds
        return (
            self.min_rows == 1 and quiet < ON_LOOP_UNDER_SECONDS and pod.running() == 0 and pod.calm(quiet)
            and not self._free.locked()
        )  # fmt: skip

    def try_run(self, arrays: Mapping[str, Array]) -> dict[str, Array] | None:
        if self.min_rows > 1 and next(iter(arrays.values())).shape[0] < self.min_rows:
            return None
        if not self._free.acquire(blocking=False):
            return None
        try:
            outputs = self.runtime.run(arrays)
            self.calls += 1
            return outputs
        finally:
            self._free.release()


def wide_options(options: RuntimeOptions, threads: int) -> RuntimeOptions:
    return replace(options, intra_op_threads=threads, num_runtimes=1)


def build_lane(
    backend: type[Runtime], module: InferenceModule, options: RuntimeOptions, threads: int, min_rows: int = 1,
    quiet_seconds: float = QUIET_SECONDS[0],
) -> WideLane:  # fmt: skip
    """A warm wide lane on a new artifact of ``threads`` intra-op threads (built in the process that serves)."""
    wide = wide_options(options, threads)
    runtime = backend(module, wide, backend.wide_artifact(module, options, threads))
    runtime.warmup()
    return WideLane(runtime, min_rows, quiet_seconds)


def build_lane_bounded(
    backend: type[Runtime], module: InferenceModule, options: RuntimeOptions, threads: int, min_rows: int = 1,
    timeout: float = LANE_BUILD_SECONDS, quiet_seconds: float = QUIET_SECONDS[0],
) -> tuple[WideLane | None, str]:  # fmt: skip
    """``build_lane`` on a thread of its own, waited for at most ``timeout`` seconds: a compile that
    hangs (a thread pool a fork left broken) or fails costs this process its lane, not its start.
    The lane, or None and why."""
    built: list[WideLane] = []
    failed: list[Exception] = []

    def build() -> None:
        try:
            built.append(build_lane(backend, module, options, threads, min_rows, quiet_seconds))
        except Exception as exc:  # noqa: BLE001 -- any failure costs the lane, never the model
            failed.append(exc)

    worker = threading.Thread(target=build, name=f"wide-lane-{module.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if built:
        return built[0], ""
    if failed:
        return None, f"building the wide lane failed: {failed[0]}"
    return None, f"building the wide lane took over {timeout:g} s (its thread is left behind)"


def usable_memory_bytes(cgroup: Path = Path("/sys/fs/cgroup"), meminfo: Path = Path("/proc/meminfo")) -> int:
    """The cgroup's memory limit (v2, then v1) when there is one, else the kernel's MemAvailable."""
    for limit in (cgroup / "memory.max", cgroup / "memory" / "memory.limit_in_bytes"):
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 says "no limit" with a huge number
            return int(text)
    fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
    return int(fields["MemAvailable"].split()[0]) * 1024


def lane_memory_refusal(module: InferenceModule, processes: int, available: int) -> str | None:
    """Why the lanes would cost too much memory, or None: one copy of the fp32 weights a process."""
    cost = module.num_parameters * 4 * processes
    if cost <= MEMORY_SHARE * available:
        return None
    return (
        f"{processes} lanes would hold {cost / 2**20:.0f} MiB of weight copies, over {MEMORY_SHARE:.0%} of the "
        f"{available / 2**20:.0f} MiB this server may use"
    )


class _HereTimer:
    """Times the wide artifact in this process, on the lane it builds at the first call (which
    ``choose`` hands back when the lane is kept), its calls alternating with the narrow runtime's
    (inferpool.engine.plan.calm_timing)."""

    def __init__(
        self, backend: type[Runtime], module: InferenceModule, options: RuntimeOptions, cpus: int, narrow: Runtime
    ) -> None:
        self.backend, self.module, self.options, self.cpus, self.narrow = backend, module, options, cpus, narrow
        self.lane: WideLane | None = None

    def pair(self, rows: int, narrow_seconds: float) -> tuple[float, float]:
        """Narrow and wide seconds on ``rows`` samples, timed here, alternating; the
        ``narrow_seconds`` timed before the lane was built is not used."""
        lane = self.lane = self.lane or build_lane(self.backend, self.module, self.options, self.cpus)
        example = _example(self.module, rows)
        narrow, wide = self.narrow, lane.runtime
        return calmest_pair(lambda: narrow.run(example), lambda: wide.run(example), REPEATS, MIN_SPEEDUP)


class _ApartTimer:
    """Times it in a process of its own (``Runtime.wide_probe_apart``): at its first call, on
    every sample count ``choose`` may ask for, so that the process starts and compiles once."""

    def __init__(
        self, backend: type[Runtime], module: InferenceModule, options: RuntimeOptions, cpus: int, rows: list[int]
    ) -> None:
        self.backend, self.module, self.options, self.cpus, self.rows = backend, module, options, cpus, rows
        self.lane: WideLane | None = None  # never built here: a process forked from this one would hang in its own
        self._pairs: dict[int, tuple[float, float]] = {}

    def pair(self, rows: int, narrow_seconds: float) -> tuple[float, float]:
        """Narrow and wide seconds on ``rows`` samples, both timed apart, alternating; the
        ``narrow_seconds`` timed here is not used: taken earlier, it would compare the lane with
        another moment."""
        if not self._pairs:
            examples = [_example(self.module, r) for r in self.rows]
            measured = self.backend.wide_seconds_apart(
                self.module, self.options, self.cpus, examples, REPEATS, PROBE_APART_SECONDS
            )
            self._pairs = dict(zip(self.rows, measured, strict=True))
        return self._pairs[rows]


def _example(module: InferenceModule, rows: int) -> dict[str, Array]:
    return dict(module.example_inputs) if rows == 1 else module.examples(rows)


def choose(
    backend: type[Runtime], narrow: Runtime, module: InferenceModule, options: RuntimeOptions, cpus: int,
    processes: int = 1, forks: bool = False,
) -> tuple[WideChoice, WideLane | None]:  # fmt: skip
    """Measure whether ``module`` gains from running alone on ``cpus`` threads; the lane it measured
    on comes back when it does (a process that forks later drops it and builds its own: see
    ServedModel.start). ``forks``: this process forks the serving processes later, so a backend
    whose wide runs would leave them hanging (``wide_probe_apart``) is measured in a process of
    its own, and no lane comes back."""
    if options.lend_idle_cores == "off":
        return WideChoice(cpus, False, "lend_idle_cores is off"), None
    if options.intra_op_threads > 1 or cpus <= 1:
        reason = "intra_op_threads is set" if options.intra_op_threads > 1 else "one usable CPU"
        return WideChoice(cpus, False, reason), None
    if not backend.wide_artifact_supported:
        return WideChoice(cpus, False, f"backend {backend.__name__} builds no wide artifact"), None
    if options.precision not in backend.wide_precisions:  # a wide lane in another precision would answer differently
        reason = f"backend {backend.__name__} builds no wide artifact in precision {options.precision}"
        return WideChoice(cpus, False, reason), None
    refusal = lane_memory_refusal(module, processes, usable_memory_bytes())
    if refusal is not None and options.lend_idle_cores == "auto":
        return WideChoice(cpus, False, refusal), None
    one = median_seconds(lambda: narrow.run(module.example_inputs), REPEATS)
    probe_batches = one < PROBE_UNDER_SECONDS and all(spec.batched for spec in module.schema.inputs)
    rows = [1, BATCH_PROBE] if probe_batches else [1]
    apart = forks and backend.wide_probe_apart
    timer = (
        _ApartTimer(backend, module, options, cpus, rows)
        if apart
        else _HereTimer(backend, module, options, cpus, narrow)
    )
    try:
        choice = _measure(timer, options, cpus, 1, one)
        if not choice.enabled and probe_batches:
            example = module.examples(BATCH_PROBE)
            choice = _measure(timer, options, cpus, BATCH_PROBE, median_seconds(lambda: narrow.run(example), REPEATS))
    except ModelLoadError as exc:  # the lane is an optimisation: the model serves without it
        log.warning("model %r: no wide lane: %s", module.name, exc)
        return WideChoice(cpus, False, f"the wide lane could not be measured: {exc}"), None
    lane = timer.lane if choice.enabled else None
    if lane is not None:
        lane.min_rows = choice.min_rows
        lane.quiet_seconds = choice.quiet_seconds()
    return choice, lane


def _measure(
    timer: _HereTimer | _ApartTimer, options: RuntimeOptions, cpus: int, rows: int, narrow_seconds: float
) -> WideChoice:
    """Narrow against wide on ``rows`` example samples: the narrow time measured here decides
    whether the call is long enough to try; the two compared come from the same place."""
    at = f"a {rows}-sample call" if rows > 1 else "a call"
    if narrow_seconds < MIN_CALL_SECONDS and options.lend_idle_cores == "auto":
        reason = f"{at} takes {narrow_seconds * 1e3:.3f} ms, under {MIN_CALL_SECONDS * 1e3:g} ms"
        return WideChoice(cpus, False, reason, round(narrow_seconds * 1e3, 3), min_rows=rows)
    narrow_seconds, wide_seconds = timer.pair(rows, narrow_seconds)
    speedup = narrow_seconds / wide_seconds
    enabled = options.lend_idle_cores == "on" or speedup >= MIN_SPEEDUP
    reason = f"{at} is {speedup:.2f}x faster on {cpus} threads" + ("" if enabled else f", under {MIN_SPEEDUP}x")
    figures = round(narrow_seconds * 1e3, 3), round(wide_seconds * 1e3, 3)
    return WideChoice(cpus, enabled, reason, *figures, min_rows=rows)
