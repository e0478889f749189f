"""ServedModel: one model served, behind the engine's narrow client (inferpool.engine.client).

One InferenceModule, a RuntimePool built from it, admission control, and one executor
(inferpool.engine.executors: inline, worker threads or the batcher) running the one request pipeline
(inferpool.engine.pipeline). The service awaits ``model.infer(inputs, deadline, request_id)`` and reads
``info`` and ``stats()``; it never sees torch.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import Any

import torch

from inferpool.engine.admission import Admission, ServiceTimes, count_samples
from inferpool.engine.backends.autoselect import resolve_backend
from inferpool.engine.backends.base import Runtime
from inferpool.engine.batch_choice import BatchChoice
from inferpool.engine.client import ModelInfo, ModelStats
from inferpool.engine.deadline_floor import DeadlineFloor
from inferpool.engine.dispatch_choice import decide
from inferpool.engine.errors import (
    ConfigError,
    DeadlineBelowFloor,
    DeadlineExceeded,
    EngineError,
    InvalidInput,
    ModelFailed,
    NotReady,
    Overloaded,
)
from inferpool.engine.executor import Executor, ExecutorConfig
from inferpool.engine.executors import EXECUTORS
from inferpool.engine.faults import check_finite
from inferpool.engine.handlers import Handler, load_handler
from inferpool.engine.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.pipeline import Pipeline
from inferpool.engine.pod_load import PodLoad
from inferpool.engine.pool import RuntimePool
from inferpool.engine.requests import Prediction, Work
from inferpool.engine.runtime_set import RuntimeSet
from inferpool.engine.schema import Array, Schema, positional
from inferpool.engine.sources import load_model, serving_options
from inferpool.engine.threads import ThreadPlan, apply_thread_plan, init_worker_thread, plan_threads, usable_cpus
from inferpool.engine.wide import build_lane, choose

log = logging.getLogger(__name__)

__all__ = ["Prediction", "ServedModel"]


class ServedModel:
    def __init__(
        self,
        module: InferenceModule,
        options: RuntimeOptions,
        plan: ThreadPlan,
        max_queue: int,
        handler: Handler | None = None,
        *,
        start: bool = True,
        pod: PodLoad | None = None,
    ) -> None:
        self.selection = resolve_backend(module, options)
        """The backend serving the model (for ``auto``: the fastest measured) and its table."""
        backend, compiled = self.selection.backend, self.selection.compiled
        self.module = module
        self.handler = handler
        """Pre- and post-processing around the model (inferpool.engine.handlers); None = tensors in and out."""
        self.options = options
        self.plan = plan
        self.max_queue = max_queue
        self.capacity = plan.runtimes + max_queue
        """Requests admitted at once (running + queued); more are refused with Overloaded."""
        self.runtimes = RuntimeSet(module.name, backend, compiled, module, options, plan.runtimes, pod)
        self.service_times = ServiceTimes()
        seed_seconds, full_call, self.batch_choice = self._seed_service_times()
        """For a batched model: whether a request waits for company (inferpool.engine.batch_choice)."""
        self.admission = Admission(self.service_times, plan.runtimes, options.max_batch_size)
        self.pipeline = Pipeline(
            coerce=self._coerce,
            run=self._call,
            release=self.admission.leave,
            check=check_finite if options.check_outputs else None,
            prepare=handler.preprocess if handler else None,
            finish=handler.postprocess if handler else None,
        )
        self.dispatch_mode, self.dispatch_selection = self._choose_executor()
        processes = self.runtimes.pod.processes
        self.wide_choice, lane = choose(backend, self.pool.runtimes[0], module, options, usable_cpus(), processes)
        if self.wide_choice.enabled:
            self.runtimes.pod.active = True  # every call in the pod counts from now on
            # A process forked later builds its own lane (its threads would stay here), in start().
            self.runtimes.wide = lane if start else None
        del lane
        self.deadline_floor = DeadlineFloor.measured(seed_seconds, full_call, self.wide_choice)
        """The shortest deadline this model can meet per sample count (inferpool.engine.deadline_floor):
        a shorter one is invalid."""
        self.deadline_floor_ms = self.deadline_floor.ms()
        # Inline until start(): no thread exists yet, so the process can still fork.
        self.executor: Executor = EXECUTORS["inline"](self.pipeline, self._executor_config())
        self.in_flight = 0
        self.accepting = False
        if start:
            self.start()

    def start(self, forked: bool = False) -> None:
        """Apply the thread plan and start the executor's threads: the model takes requests.

        Separate from loading so that a parent process can load, choose and warm the model once
        and fork serving processes that share its weights (inferpool.service.processes.supervisor): threads do not
        survive a fork, and a parent that ran an OpenMP parallel region leaves forked children
        hanging on their first one (measured: torch with 2 intra-op threads), so the parent
        loads with one intra-op thread and each child starts here (``forked``) with its plan
        (``load`` applied it already when the model is started in the process that loaded it)."""
        backend = self.runtimes.backend
        if forked:
            apply_thread_plan(self.plan)
        if backend.needs_own_artifact(self.runtimes.compiled, self.plan, forked=forked):
            # A forked process: the shared artifact's threads stayed in the parent (measured on
            # an ORT session: a child's runs stay correct but use one thread; on an OpenVINO
            # model of two streams they hang), so this process builds its own, at the cost of
            # its own copy of the weights. Or an artifact sized for fewer runtimes than the plan's.
            self.runtimes.rebuild_artifact(self.plan.runtimes)
            self.selection = replace(self.selection, compiled=self.runtimes.compiled)  # the old one goes
            log.info("model %r: built this process's own %s artifact for %d intra-op threads (%d runtimes)",
                     self.name, self.selection.name, self.plan.intra_op_threads, self.plan.runtimes)  # fmt: skip
        if forked and self.wide_choice.enabled:
            choice = self.wide_choice
            self.runtimes.wide = build_lane(backend, self.module, self.options, choice.threads, choice.min_rows)
            log.info("model %r: a call alone in the pod runs on %d threads (%s)",
                     self.name, choice.threads, choice.reason)  # fmt: skip
        if forked and self.plan.intra_op_threads > 1:  # the parent timed its calls on one thread
            self.deadline_floor = self.deadline_floor.faster(self._example_call_seconds(repeats=3))
            self.deadline_floor_ms = self.deadline_floor.ms()
        self.executor = EXECUTORS[self.dispatch_mode](self.pipeline, self._executor_config())
        self.accepting = True

    def resize(self, plan: ThreadPlan) -> None:
        """Serve with ``plan``'s runtime count from ``start()`` on, for a model not started yet (a
        supervisor re-splits the CPUs when its model set changes, before it forks); see
        RuntimeSet.resize."""
        if self.accepting:
            raise RuntimeError(f"model {self.name!r} is serving: only a model not started yet can be resized")
        self.runtimes.resize(plan.runtimes)
        self.plan = plan
        self.capacity = plan.runtimes + self.max_queue
        self.admission.runtimes = plan.runtimes

    @property
    def pool(self) -> RuntimePool[Runtime]:
        return self.runtimes.pool

    @property
    def replaced_runtimes(self) -> int:
        return self.runtimes.replaced

    def _choose_executor(self) -> tuple[str, dict[str, Any] | None]:
        """``batch`` when batching is on, else the configured dispatch, or for ``auto`` the
        one that measures faster for this backend's call (see inferpool.engine.dispatch_choice)."""
        options = self.options
        if options.max_batch_size > 1:
            specs = self.schema.inputs + self.schema.outputs
            if not all(spec.batched for spec in specs):
                raise ConfigError(
                    f"model {self.name!r} has inputs or outputs without a batch dimension, so requests cannot be "
                    "batched together: set max_batch_size=1"
                )
            batching = self.batch_choice
            if batching is None:
                return "batch", None
            mode = options.wait_for_company
            (log.info if batching.waits or mode != "auto" else log.warning)(
                "model %r: %s (wait_for_company %s)", self.name, batching.reason, mode
            )
            return "batch", batching.report() | {"wait_for_company": mode}
        if options.dispatch != "auto":
            return options.dispatch, None
        # Timed on a runtime directly: these calls must not teach admission control anything.
        runtime, example = self.pool.runtimes[0], self.module.example_inputs
        choice = decide(lambda: runtime.run(example), self.plan.cpus)
        return choice.mode, choice.figures

    def _executor_config(self) -> ExecutorConfig:
        options = self.options

        def init() -> None:
            init_worker_thread(self.plan)
            if options.warmup_iters:  # per-thread state (OpenMP team, allocator) is lazy
                self._run(self.module.example_inputs)

        return ExecutorConfig(
            name=f"{self.name}-{'batcher' if self.dispatch_mode == 'batch' else 'worker'}",
            threads=self.plan.runtimes,
            initializer=init,
            max_batch_size=options.max_batch_size,
            # A model that cannot gain from batching joins only what is queued (batch_choice).
            max_delay=(
                self.batch_choice.delay_seconds(options.wait_for_company, options.max_queue_delay_us)
                if self.batch_choice
                else options.max_queue_delay_us * 1e-6
            ),
            preferred=options.preferred_batch_sizes,
            call_seconds=self.service_times.predict,
        )

    def _seed_service_times(self) -> tuple[list[float], tuple[int, float] | None, BatchChoice | None]:
        """Time warm calls at batch 1 and at a full batch (max_batch_size, at least 8), so that
        admission control has the fixed and the per-sample cost before the first request. The
        batch-1 calls' seconds come back and the full batch's (rows, fastest seconds): the deadline
        floor's figures; and for a batched model whether batching can win
        (inferpool.engine.batch_choice; else None)."""
        seconds = self._example_call_seconds(repeats=3)
        if not all(spec.batched for spec in self.schema.inputs):
            return seconds, None, None
        rows = max(8, self.options.max_batch_size)
        full = self.module.examples(rows)
        self._call(full)  # warm: a new batch size's first call allocates
        times = []
        for _ in range(1 if self.options.max_batch_size <= 1 else 2):  # no batching to judge: one call
            started = time.perf_counter()
            self._call(full)
            times.append(time.perf_counter() - started)
        if self.options.max_batch_size <= 1:
            return seconds, (rows, times[0]), None
        return seconds, (rows, min(times)), BatchChoice(rows, statistics.median(seconds) * 1e3, min(times) * 1e3)

    def time_example_call(self, repeats: int = 5) -> float:
        """Median seconds of a warm call on the example inputs."""
        return statistics.median(self._example_call_seconds(repeats))

    def _example_call_seconds(self, repeats: int) -> list[float]:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            self._call(self.module.example_inputs)
            times.append(time.perf_counter() - started)
        return times

    @classmethod
    def load(
        cls,
        source: str,
        options: RuntimeOptions,
        *,
        max_queue: int = 64,
        shares: int = 1,
        name: str | None = None,
        handler: str | None = None,
        start: bool = True,
        pod: PodLoad | None = None,
    ) -> ServedModel:
        """Load, compile and warm a model; ``shares`` pools split the CPUs (see plan_threads),
        ``name`` overrides the model's own, ``handler`` ('package.module:attr', see
        inferpool.engine.handlers) turns request payloads into its inputs and its outputs into answers.
        ``start=False`` loads for processes forked later, which each call ``start()``."""
        options = serving_options(source, options)  # an ONNX file: the onnxruntime backend
        plan = plan_threads(options, shares=shares)
        # Fork-safe loading measures at one intra-op thread; see start().
        apply_thread_plan(plan if start else replace(plan, intra_op_threads=1))
        started = time.perf_counter()
        spec = load_model(source)
        module = InferenceModule.from_spec(replace(spec, name=name) if name else spec)
        handles = load_handler(handler) if handler else None
        served = cls(module, options, plan, max_queue, handles, start=start, pod=pod)
        log.info(
            "model %r ready in %.2fs: backend=%s dispatch=%s runtimes=%d intra_op_threads=%d usable_cpus=%d "
            "parameters=%d wide=%s (%s)",
            module.name, time.perf_counter() - started, served.selection.name, served.dispatch_mode, plan.runtimes,
            plan.intra_op_threads, plan.cpus, module.num_parameters, served.wide_choice.enabled,
            served.wide_choice.reason,
        )  # fmt: skip
        return served

    @property
    def name(self) -> str:
        return self.module.name

    @property
    def schema(self) -> Schema:
        return self.module.schema

    async def infer(self, inputs: object, deadline: float | None = None, request_id: str | None = None) -> Prediction:
        """Admit one request and run it through the executor (inline, worker threads or the batcher).

        ``deadline`` is an absolute ``time.monotonic()`` value (None = none). Raises
        InvalidInput, Overloaded (queue full), PredictedWaitExceeded (the work ahead would make
        it late: refused at once), DeadlineExceeded (it passed while queued, and the request
        never ran, or while running, and the run finishes in the background), ModelFailed.
        """
        if not self.accepting:
            raise NotReady(f"model {self.name!r} is shutting down")
        admission = self.admission
        # Counted until the pipeline is done with a request, not until its caller stops
        # waiting, so that requests whose callers timed out cannot pile up beyond the bound.
        if admission.requests >= self.capacity:
            raise Overloaded(f"{admission.requests} requests are already in flight for model {self.name!r}")
        samples = self.handler.samples(inputs) if self.handler else count_samples(self.schema, inputs)
        if samples > self.options.max_request_samples:
            raise InvalidInput(
                f"the request carries {samples} samples; model {self.name!r} takes at most "
                f"{self.options.max_request_samples} per request (max_request_samples): split it"
            )
        if deadline is not None:
            budget = deadline - time.monotonic()
            if budget <= 0:
                raise DeadlineExceeded(f"the request's deadline passed before model {self.name!r} got it")
            if samples > 1 and budget < self.deadline_floor.seconds(samples):
                raise DeadlineBelowFloor(samples, self.deadline_floor.ms(samples))
            admission.check(samples, budget)
        admission.enter(samples)
        # Only the event loop touches in_flight, so a plain int is race-free.
        self.in_flight += 1
        try:
            pending = self.executor.run(Work(inputs, samples, deadline, request_id))
            if deadline is None:
                return await pending
            if self.dispatch_mode != "inline":
                return await self._until(pending, deadline)
            # Inline, the call runs to its end before anything else can: no timer to arm, but
            # an answer past the deadline is a 504 on every executor alike.
            prediction = await pending
            if time.monotonic() > deadline:
                raise DeadlineExceeded(f"the request's deadline passed while model {self.name!r} ran it")
            return prediction
        finally:
            self.in_flight -= 1

    async def _until(self, pending: Awaitable[Prediction], deadline: float) -> Prediction:
        # asyncio.timeout cancels only this task's wait (no extra task, unlike wait_for); the
        # worker sees the cancelled future and drops the answer; the runtime goes back as usual.
        timeout = asyncio.timeout(deadline - time.monotonic())
        try:
            async with timeout:
                return await pending
        except TimeoutError:
            if not timeout.expired():
                raise
            raise DeadlineExceeded(f"the request's deadline passed while model {self.name!r} ran it") from None

    def _coerce(self, inputs: object) -> tuple[dict[str, Array], bool]:
        return self.schema.coerce_inputs(positional(self.schema, inputs), strict=self.options.check_inputs)

    def call(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        """One bare model call on arrays already shaped for it: no admission, validation or
        hand-off (what benchmarks compare the whole path against)."""
        return self._run(arrays)

    def _call(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        """One model call, timed for admission control; model exceptions become ModelFailed."""
        started = time.perf_counter()
        try:
            outputs = self._run(arrays)
        except EngineError:
            raise
        except Exception as exc:
            # Logged once here with the traceback; the caller gets a message without internals.
            log.exception("model %r failed on a request", self.name)
            raise ModelFailed(
                f"the model failed on this input ({type(exc).__name__}); the server log has the details"
            ) from exc
        rows = next(iter(arrays.values())).shape[0] if arrays else 1
        self.service_times.observe(rows, time.perf_counter() - started)
        return outputs

    def _run(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        return self.runtimes.run(arrays)

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(
            name=self.name,
            backend=self.selection.name,
            dispatch=self.dispatch_mode,
            max_batch_size=self.options.max_batch_size,
            runtimes=self.plan.runtimes,
            intra_op_threads=self.plan.intra_op_threads,
            usable_cpus=self.plan.cpus,
            capacity=self.capacity,
            torch_version=torch.__version__,
            handler=self.handler,
            backend_selection=self.selection.report() if self.selection.trials else None,
            dispatch_selection=self.dispatch_selection,
            wide_selection=self.wide_choice.report(),
            precision_selection=self._precision_selection(),
            deadline_floor_ms=self.deadline_floor_ms,
        )

    def _precision_selection(self) -> dict[str, Any] | None:
        if self.options.precision == "fp32":
            return None
        # Imported here: the precision module (and the exporter it imports) only for int8 models.
        from inferpool.engine.backends.precision import precision_choice

        choice = precision_choice(self.module)
        return None if choice is None else choice.report()

    def stats(self) -> ModelStats:
        pool = self.pool
        size, idle = pool.size, pool.idle
        return ModelStats(
            in_flight=self.in_flight,
            runtimes=size,
            planned_runtimes=self.plan.runtimes,
            busy_runtimes=size - idle,
            idle_runtimes=idle,
            worker_threads=self.worker_threads,
            live_workers=self.live_workers,
            replaced_runtimes=self.replaced_runtimes,
            failed_replacements=self.runtimes.failed_replacements,
            replaced_workers=self.replaced_workers,
            accepting=self.accepting,
        )

    @property
    def worker_threads(self) -> int:
        """Inference threads this model should have (0 when it runs inline on the event loop)."""
        return self.executor.count

    @property
    def live_workers(self) -> int:
        """Inference threads alive now; a dead one is replaced at once (see ThreadSet)."""
        return self.executor.alive

    @property
    def replaced_workers(self) -> int:
        """Worker threads started to replace dead ones, for metrics."""
        return self.executor.replaced

    @property
    def healthy(self) -> bool:
        """See ModelStats.healthy."""
        return self.stats().healthy

    def close(self) -> None:
        self.accepting = False
        self.executor.close()
