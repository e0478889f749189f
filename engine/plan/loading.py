"""Loading a served model: from its source to the choices measured before it takes requests.

``ServedModel.load`` reads the source (inferpool.engine.models.sources), plans the threads and builds
the ``ServedModel``, whose constructor builds the runtimes and the pipeline and then asks
``measure`` here for what only timing the warm model can say: admission's first estimates,
whether batching can win, which executor runs the requests, whether a call alone takes the
wide lane, and the shortest deadline the model can meet.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from inferpool.engine.errors import ConfigError
from inferpool.engine.executors import ExecutorConfig
from inferpool.engine.models.handlers import Handler, load_handler
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.models.sources import load_model, serving_options
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.batch_choice import BatchChoice
from inferpool.engine.plan.deadline_floor import DeadlineFloor
from inferpool.engine.plan.dispatch_choice import DispatchChoice, decide
from inferpool.engine.plan.threads import ThreadPlan, apply_thread_plan, init_worker_thread, plan_threads, usable_cpus
from inferpool.engine.plan.wide import WideChoice, choose
from inferpool.engine.schema import Array
from inferpool.engine.serving.pipeline import Pipeline
from inferpool.engine.serving.runtime_set import RuntimeSet

if TYPE_CHECKING:
    from inferpool.engine.serving.served import ServedModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """What ``ServedModel.load`` builds a model from."""

    module: InferenceModule
    options: RuntimeOptions
    plan: ThreadPlan
    handler: Handler | None
    started: float
    """``time.perf_counter()`` when loading began, for the ready log line."""


def read_source(
    source: str, options: RuntimeOptions, *, shares: int, name: str | None, handler: str | None, start: bool
) -> Source:
    """Load the model and its handler; ``shares`` pools split the CPUs (see plan_threads)."""
    options = serving_options(source, options)  # an ONNX file: the onnxruntime backend
    plan = plan_threads(options, shares=shares)
    # Fork-safe loading measures at one intra-op thread; see ServedModel.start.
    apply_thread_plan(plan if start else replace(plan, intra_op_threads=1))
    started = time.perf_counter()
    spec = load_model(source)
    module = InferenceModule.from_spec(replace(spec, name=name) if name else spec)
    return Source(module, options, plan, load_handler(handler) if handler else spec.handler, started)


def log_ready(served: ServedModel, started: float) -> None:
    plan, choice = served.plan, served.wide_choice
    log.info(
        "model %r ready in %.2fs: backend=%s dispatch=%s runtimes=%d intra_op_threads=%d usable_cpus=%d "
        "parameters=%d wide=%s (%s)",
        served.name, time.perf_counter() - started, served.selection.name, served.dispatch_mode, plan.runtimes,
        plan.intra_op_threads, plan.cpus, served.module.num_parameters, choice.enabled, choice.reason,
    )  # fmt: skip


@dataclass(frozen=True)
class Measured:
    """What timing the warm model decided, at load."""

    seed_seconds: list[float]
    """The batch-1 example calls' seconds (the deadline floor is their fastest)."""
    full_call: tuple[int, float] | None
    """The full-batch call's rows and fastest seconds, when one was timed (the floor's per-sample slope)."""
    batch_choice: BatchChoice | None
    """For a batched model: whether a request waits for company (inferpool.engine.plan.batch_choice)."""
    dispatch_mode: str
    dispatch_selection: dict[str, Any] | None
    wide_choice: WideChoice


def measure(
    pipeline: Pipeline, runtimes: RuntimeSet, module: InferenceModule, plan: ThreadPlan, start: bool
) -> Measured:
    options = runtimes.options
    seconds, full_call, batching = seed_service_times(pipeline, module, options)
    mode, selection = choose_executor(pipeline, runtimes, module, options, plan, batching)
    first, processes = runtimes.pool.runtimes[0], runtimes.pod.processes
    choice, lane = choose(runtimes.backend, first, module, options, usable_cpus(), processes, forks=not start)
    if choice.enabled:
        runtimes.pod.active = True  # every call in the pod counts from now on
        # A process forked later builds its own lane (its threads would stay here), in start().
        runtimes.wide = lane if start else None
    return Measured(seconds, full_call, batching, mode, selection, choice)


def seed_service_times(
    pipeline: Pipeline, module: InferenceModule, options: RuntimeOptions
) -> tuple[list[float], tuple[int, float] | None, BatchChoice | None]:
    """Time warm calls at batch 1 and at a full batch (max_batch_size, at least 8), so that
    admission control has the fixed and the per-sample cost before the first request. The
    batch-1 calls' seconds come back and the full batch's (rows, fastest seconds): the deadline
    floor's figures; and for a batched model whether batching can win
    (inferpool.engine.plan.batch_choice; else None)."""
    seconds = example_call_seconds(pipeline, module.example_inputs, repeats=3)
    if not all(spec.batched for spec in module.schema.inputs):
        return seconds, None, None
    rows = max(8, options.max_batch_size)
    full = module.examples(rows)
    pipeline.call(full)  # warm: a new batch size's first call allocates
    times = []
    for _ in range(1 if options.max_batch_size <= 1 else 2):  # no batching to judge: one call
        started = time.perf_counter()
        pipeline.call(full)
        times.append(time.perf_counter() - started)
    if options.max_batch_size <= 1:
        return seconds, (rows, times[0]), None
    return seconds, (rows, min(times)), BatchChoice(rows, statistics.median(seconds) * 1e3, min(times) * 1e3)


def example_call_seconds(pipeline: Pipeline, example: Mapping[str, Array], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` warm calls on ``example`` (timed for admission too)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        pipeline.call(example)
        times.append(time.perf_counter() - started)
    return times


def choose_executor(
    pipeline: Pipeline, runtimes: RuntimeSet, module: InferenceModule, options: RuntimeOptions, plan: ThreadPlan,
    batching: BatchChoice | None,
) -> tuple[str, dict[str, Any] | None]:  # fmt: skip
    """``batch`` when batching is on, else the configured dispatch, or for ``auto`` the
    one that measures faster for this backend's call (see inferpool.engine.plan.dispatch_choice)."""
    name = pipeline.name
    if options.max_batch_size > 1:
        specs = module.schema.inputs + module.schema.outputs
        if not all(spec.batched for spec in specs):
            raise ConfigError(
                f"model {name!r} has inputs or outputs without a batch dimension, so requests cannot be "
                "batched together: set max_batch_size=1"
            )
        # Only a batcher that waits and may stop waiting (patience) has an idle path to choose for.
        auto = options.wait_for_company == "auto" and options.max_queue_delay_us > 0
        waits = auto and (batching is None or batching.waits)
        idle = {"when_idle": _unbatched_dispatch(runtimes, module, options, plan)} if waits else {}
        if batching is None:
            return "batch", idle or None
        mode = options.wait_for_company
        (log.info if batching.waits or mode != "auto" else log.warning)(
            "model %r: %s (wait_for_company %s)", name, batching.reason, mode
        )
        return "batch", batching.report() | {"wait_for_company": mode} | idle
    if options.dispatch != "auto":
        return options.dispatch, None
    choice = _decide(runtimes, module, plan)
    return choice.mode, choice.figures


def _decide(runtimes: RuntimeSet, module: InferenceModule, plan: ThreadPlan) -> DispatchChoice:
    # Timed on a runtime directly: these calls must not teach admission control anything.
    runtime, example = runtimes.pool.runtimes[0], module.example_inputs
    return decide(lambda: runtime.run(example), plan.cpus)


def _unbatched_dispatch(
    runtimes: RuntimeSet, module: InferenceModule, options: RuntimeOptions, plan: ThreadPlan
) -> str:
    """How the batcher runs a request when nothing is queued, forming or running: with no
    company to wait for, the hand-off to a worker thread is the whole difference from batching
    off (digits at one connection: 230 against 159 us a request), so where unbatched dispatch
    would run inline (measured, or set), so does the idle batcher."""
    return options.dispatch if options.dispatch != "auto" else _decide(runtimes, module, plan).mode


def executor_config(
    pipeline: Pipeline, module: InferenceModule, options: RuntimeOptions, plan: ThreadPlan, mode: str,
    batching: BatchChoice | None, selection: dict[str, Any] | None = None,
) -> ExecutorConfig:  # fmt: skip
    runtimes = pipeline.runtimes

    def init() -> None:
        init_worker_thread(plan)
        if options.warmup_iters:  # per-thread state (OpenMP team, allocator) is lazy
            runtimes.run(module.example_inputs)

    return ExecutorConfig(
        name=f"{pipeline.name}-{'batcher' if mode == 'batch' else 'worker'}",
        threads=plan.runtimes,
        initializer=init,
        max_batch_size=options.max_batch_size,
        # A model that cannot gain from batching joins only what is queued (batch_choice).
        max_delay=(
            batching.delay_seconds(options.wait_for_company, options.max_queue_delay_us)
            if batching
            else options.max_queue_delay_us * 1e-6
        ),
        adaptive_wait=options.wait_for_company == "auto",
        inline_when_idle=mode == "batch" and (selection or {}).get("when_idle") == "inline",
        preferred=options.preferred_batch_sizes,
        call_seconds=pipeline.admission.times.predict,
    )


def forked_floor(pipeline: Pipeline, module: InferenceModule, floor: DeadlineFloor) -> DeadlineFloor:
    """A forked process's deadline floor: the parent timed its calls on one thread."""
    return floor.faster(example_call_seconds(pipeline, module.example_inputs, repeats=3))
