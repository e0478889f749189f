"""Loading a served model: from its source to the choices measured before it takes requests.

``ServedModel.load`` reads the source (inferpool.engine.models.sources), plans the threads and builds
the ``ServedModel``, whose constructor builds the runtimes and the pipeline and then asks
``measure`` here for what only timing the warm model can say: admission's first estimates,
whether batching can win, the batch for ``max_batch_size = 0`` (inferpool.engine.plan.auto_batch),
which executor runs the requests, whether a call alone takes the wide lane, and the shortest
deadline the model can meet.
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
from inferpool.engine.plan import halt_polling
from inferpool.engine.plan.auto_batch import BatchDecision, BatchFigures, decide_batch, explicit
from inferpool.engine.plan.batch_choice import BatchChoice
from inferpool.engine.plan.batch_memory import decision_path, read_decision, write_decision
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
        "model %r ready in %.2fs: backend=%s dispatch=%s max_batch_size=%d (%s) runtimes=%d intra_op_threads=%d "
        "usable_cpus=%d parameters=%d wide=%s (%s)",
        served.name, time.perf_counter() - started, served.selection.name, served.dispatch_mode,
        served.options.max_batch_size, served.batch_decision.reason, plan.runtimes, plan.intra_op_threads, plan.cpus,
        served.module.num_parameters, choice.enabled, choice.reason,
    )  # fmt: skip
    if choice.enabled:
        halts = halt_polling.advice()
        if halts is not None:
            log.info("model %r: %s", served.name, halts)


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
    options: RuntimeOptions
    """The options it serves with: ``max_batch_size`` 0 resolved to ``batch_decision``'s size."""
    batch_decision: BatchDecision


class UnbatchedDispatch:
    """Where a request runs when it is not batched: as set, or for ``auto`` measured once
    (inferpool.engine.plan.dispatch_choice) for both the batch decision and the executor."""

    def __init__(
        self, runtimes: RuntimeSet, module: InferenceModule, options: RuntimeOptions, plan: ThreadPlan
    ) -> None:
        self.configured = options.dispatch
        self._measured = (runtimes, module, plan)
        self._choice: DispatchChoice | None = None

    def choice(self) -> DispatchChoice:
        if self._choice is None:
            self._choice = _decide(*self._measured)
        return self._choice

    @property
    def mode(self) -> str:
        return self.configured if self.configured != "auto" else self.choice().mode


def measure(
    pipeline: Pipeline, runtimes: RuntimeSet, module: InferenceModule, plan: ThreadPlan, start: bool, served_by: str
) -> Measured:
    """``served_by`` names the backend and precision chosen (the batch decision is kept under it)."""
    seconds, full_call, timed = seed_service_times(pipeline, module, runtimes.options)
    unbatched = UnbatchedDispatch(runtimes, module, runtimes.options, plan)
    decision = settle_batch(module, runtimes.options, plan, served_by, timed, unbatched)
    options = replace(runtimes.options, max_batch_size=decision.size)
    batching = timed if decision.size > 1 else None
    mode, selection = choose_executor(pipeline.name, module, options, batching, unbatched)
    first, processes = runtimes.pool.runtimes[0], runtimes.pod.processes
    choice, lane = choose(runtimes.backend, first, module, options, usable_cpus(), processes, forks=not start)
    if choice.enabled:
        runtimes.pod.active = True  # every call in the pod counts from now on
        # A process forked later builds its own lane (its threads would stay here), in start().
        runtimes.wide = lane if start else None
    return Measured(seconds, full_call, batching, mode, selection, choice, options, decision)


def settle_batch(
    module: InferenceModule, options: RuntimeOptions, plan: ThreadPlan, served_by: str, timed: BatchChoice | None,
    unbatched: UnbatchedDispatch,
) -> BatchDecision:  # fmt: skip
    """``max_batch_size`` as set, or for 0 as an earlier start decided (inferpool.engine.plan.batch_memory)
    or as the rule decides from this start's figures (inferpool.engine.plan.auto_batch); logged."""
    if options.max_batch_size:
        return explicit(options.max_batch_size)
    path = decision_path(module, options, served_by, plan)
    kept = read_decision(path) if path is not None else None
    if kept is not None:
        decision = replace(kept, cached=True)
    else:
        batched = all(spec.batched for spec in module.schema.inputs + module.schema.outputs)
        decision = decide_batch(BatchFigures(batched, unbatched.mode, options.max_queue_delay_us, timed))
        if path is not None:
            write_decision(path, decision)
    kept_note = " (as decided at an earlier start)" if decision.cached else ""
    log.info("model %r: max_batch_size=0 %s%s %s", module.name, decision.reason, kept_note, decision.figures)
    return decision


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
    rows = max(8, options.largest_batch)
    full = module.examples(rows)
    pipeline.call(full)  # warm: a new batch size's first call allocates
    times = []
    judged = options.max_batch_size != 1  # for 0 too: start-up decides from these calls
    for _ in range(2 if judged else 1):  # no batching to judge: one call
        started = time.perf_counter()
        pipeline.call(full)
        times.append(time.perf_counter() - started)
    if not judged:
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
    name: str, module: InferenceModule, options: RuntimeOptions, batching: BatchChoice | None,
    unbatched: UnbatchedDispatch,
) -> tuple[str, dict[str, Any] | None]:  # fmt: skip
    """``batch`` when batching is on (``options.max_batch_size`` resolved), else the configured
    dispatch, or for ``auto`` the one that measures faster for this backend's call (see
    inferpool.engine.plan.dispatch_choice)."""
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
        # With no company to wait for, the hand-off to a worker thread is the whole difference from
        # batching off (digits at one connection: 230 against 159 us a request), so where unbatched
        # dispatch would run inline (measured, or set), so does the idle batcher.
        idle = {"when_idle": unbatched.mode} if waits else {}
        if batching is None:
            return "batch", idle or None
        mode = options.wait_for_company
        (log.info if batching.waits or mode != "auto" else log.warning)(
            "model %r: %s (wait_for_company %s)", name, batching.reason, mode
        )
        return "batch", batching.report() | {"wait_for_company": mode} | idle
    if options.dispatch != "auto":
        return options.dispatch, None
    choice = unbatched.choice()
    return choice.mode, choice.figures


def _decide(runtimes: RuntimeSet, module: InferenceModule, plan: ThreadPlan) -> DispatchChoice:
    # Timed on a runtime directly: these calls must not teach admission control anything.
    runtime, example = runtimes.pool.runtimes[0], module.example_inputs
    return decide(lambda: runtime.run(example), plan.cpus)


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
