"""ServedModel: one model served, behind the engine's narrow client (inferpool.engine.client).

One InferenceModule, the RuntimeSet built from it, admission control, and one executor
(inferpool.engine.executors: inline, worker threads or the batcher) running the one request
pipeline (inferpool.engine.serving.pipeline), which holds what a request needs. Loading and the choices
measured at load are inferpool.engine.plan.loading's. The service awaits
``model.infer(inputs, deadline, request_id)`` and reads ``info`` and ``stats()``; it never sees torch.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from inferpool.engine.backends.autoselect import resolve_backend
from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.precision_choice import precision_choice
from inferpool.engine.client import ModelInfo, ModelStats
from inferpool.engine.errors import NotReady
from inferpool.engine.executors import EXECUTORS, Executor, ExecutorConfig
from inferpool.engine.models.handlers import Handler
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan import loading
from inferpool.engine.plan.deadline_floor import DeadlineFloor
from inferpool.engine.plan.pod_load import PodLoad
from inferpool.engine.plan.threads import ThreadPlan, apply_thread_plan
from inferpool.engine.plan.wide import build_lane_bounded
from inferpool.engine.schema import Array, Schema
from inferpool.engine.serving.admission import Admission, ServiceTimes
from inferpool.engine.serving.inline_group import InlineRequest, run_together
from inferpool.engine.serving.pipeline import Pipeline
from inferpool.engine.serving.pool import RuntimePool
from inferpool.engine.serving.requests import Outcome, Prediction
from inferpool.engine.serving.runtime_set import RuntimeSet

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
        priority_levels: int = 1,
    ) -> None:
        self.selection = resolve_backend(module, options)
        """The backend serving the model (for ``auto``: the fastest measured) and its table."""
        backend, compiled = self.selection.backend, self.selection.compiled
        self.module = module
        self.handler = handler
        """Pre- and post-processing around the model (inferpool.engine.models.handlers); None = tensors in and out."""
        self.options = options
        self.plan = plan
        self.max_queue = max_queue
        self.runtimes = RuntimeSet(module.name, backend, compiled, module, options, plan.runtimes, pod)
        self.admission = Admission(ServiceTimes(), plan.runtimes, options.max_batch_size, plan.runtimes + max_queue)
        self.admission.levels = priority_levels
        self.pipeline = Pipeline(module.name, module.schema, self.runtimes, self.admission, options, handler)
        measured = loading.measure(self.pipeline, self.runtimes, module, plan, start, self._served_by())
        # max_batch_size 0 is decided only now, after the backend, precision and dispatch.
        self.options = options = measured.options
        self.admission.max_batch_size = options.max_batch_size
        self.batch_decision = measured.batch_decision
        self.batch_choice = measured.batch_choice
        self.dispatch_mode, self.dispatch_selection = measured.dispatch_mode, measured.dispatch_selection
        self.wide_choice = measured.wide_choice
        self.deadline_floor = DeadlineFloor.measured(measured.seed_seconds, measured.full_call, self.wide_choice)
        """The shortest deadline this model can meet per sample count (inferpool.engine.plan.deadline_floor):
        a shorter one is invalid."""
        self.deadline_floor_ms = self.deadline_floor.ms()
        self.pipeline.floor = self.deadline_floor
        # Inline until start(): no thread exists yet, so the process can still fork.
        self.executor: Executor = EXECUTORS["inline"](self.pipeline, self._executor_config())
        self.in_flight = 0
        self.accepting = False
        self.inline = False
        """Whether its requests run on the event loop itself (the inline executor): then
        ``infer_inline`` answers one with no await (a front end can skip its task)."""
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
            quiet = choice.quiet_seconds()
            lane, why_not = build_lane_bounded(
                backend, self.module, self.options, choice.threads, choice.min_rows, quiet_seconds=quiet
            )
            if lane is None:
                log.warning("model %r: serving without a wide lane in this process: %s", self.name, why_not)
                self.wide_choice = replace(choice, enabled=False, reason=f"{choice.reason}; {why_not}")
            else:
                self.runtimes.wide = lane
                log.info("model %r: a call alone in the pod runs on %d threads (%s)",
                         self.name, choice.threads, choice.reason)  # fmt: skip
        if forked and self.plan.intra_op_threads > 1:  # the parent timed its calls on one thread
            self.deadline_floor = loading.forked_floor(self.pipeline, self.module, self.deadline_floor)
            self.pipeline.floor = self.deadline_floor
            self.deadline_floor_ms = self.deadline_floor.ms()
        self.executor = EXECUTORS[self.dispatch_mode](self.pipeline, self._executor_config())
        self.inline = self.dispatch_mode == "inline"
        self.accepting = True

    def resize(self, plan: ThreadPlan) -> None:
        """Serve with ``plan``'s runtime count from ``start()`` on, for a model not started yet (a
        supervisor re-splits the CPUs when its model set changes, before it forks); see
        RuntimeSet.resize."""
        if self.accepting:
            raise RuntimeError(f"model {self.name!r} is serving: only a model not started yet can be resized")
        self.runtimes.resize(plan.runtimes)
        self.plan = plan
        self.admission.runtimes = plan.runtimes
        self.admission.capacity = plan.runtimes + self.max_queue

    @property
    def capacity(self) -> int:
        """Requests admitted at once (running + queued); more are refused with Overloaded."""
        return self.admission.capacity

    @property
    def pool(self) -> RuntimePool[Runtime]:
        return self.runtimes.pool

    @property
    def replaced_runtimes(self) -> int:
        return self.runtimes.replaced

    def _served_by(self) -> str:
        """The backend and precision serving, as the batch decision is kept under them."""
        choice = precision_choice(self.module)
        precision = choice.served if choice is not None else self.options.precision
        backend = self.selection.backend
        return f"{self.selection.name} {backend.__module__}.{backend.__qualname__} {precision}"

    def _executor_config(self) -> ExecutorConfig:
        return loading.executor_config(
            self.pipeline, self.module, self.options, self.plan, self.dispatch_mode, self.batch_choice,
            self.dispatch_selection,
        )  # fmt: skip

    def time_example_call(self, repeats: int = 5) -> float:
        """Median seconds of a warm call on the example inputs."""
        return statistics.median(loading.example_call_seconds(self.pipeline, self.module.example_inputs, repeats))

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
        priority_levels: int = 1,
    ) -> ServedModel:
        """Load, compile and warm a model; ``shares`` pools split the CPUs (see plan_threads),
        ``name`` overrides the model's own, ``handler`` ('package.module:attr', see
        inferpool.engine.models.handlers) turns request payloads into its inputs and its outputs into answers.
        ``start=False`` loads for processes forked later, which each call ``start()``;
        ``priority_levels`` orders its queue (inferpool.engine.serving.priorities)."""
        read = loading.read_source(source, options, shares=shares, name=name, handler=handler, start=start)
        served = cls(
            read.module, read.options, read.plan, max_queue, read.handler, start=start, pod=pod,
            priority_levels=priority_levels,
        )  # fmt: skip
        loading.log_ready(served, read.started)
        return served

    @property
    def name(self) -> str:
        return self.module.name

    @property
    def schema(self) -> Schema:
        return self.module.schema

    async def infer(
        self, inputs: object, deadline: float | None = None, request_id: str | None = None, level: int = 0
    ) -> Prediction:
        """Admit one request at priority ``level`` and run it through the executor (inline, worker
        threads or the batcher).

        ``deadline`` is an absolute ``time.monotonic()`` value (None = none). Raises
        InvalidInput, Overloaded (queue full), PredictedWaitExceeded (the work ahead would make
        it late: refused at once), DeadlineExceeded (it passed while queued, and the request
        never ran, or while running, and the run finishes in the background), ModelFailed.
        """
        if not self.accepting:
            raise NotReady(f"model {self.name!r} is shutting down")
        # Only the event loop touches in_flight, so a plain int is race-free.
        self.in_flight += 1
        try:
            return await self.executor.infer(inputs, deadline, request_id, level)
        finally:
            self.in_flight -= 1

    def infer_inline(self, inputs: object, deadline: float | None = None, request_id: str | None = None) -> Prediction:
        """``infer`` for a model whose executor is inline (``self.inline``), on the event loop
        thread, without a coroutine: what the inline executor's ``infer`` would return."""
        if not self.accepting:
            raise NotReady(f"model {self.name!r} is shutting down")
        if not self.inline:
            raise RuntimeError(f"model {self.name!r} runs on its {self.dispatch_mode!r} executor, not inline")
        self.in_flight += 1
        try:
            return self.pipeline.inline(inputs, deadline, request_id)
        finally:
            self.in_flight -= 1

    def infer_inline_together(self, requests: Sequence[InlineRequest]) -> list[Outcome]:
        """``infer_inline`` for requests that arrived together: one outcome each, in order (its
        Prediction or its error), stacked into one model call where the model allows it
        (inferpool.engine.serving.inline_group); one request alone takes ``infer_inline``'s path."""
        if len(requests) == 1 or not self.pipeline.stackable:
            return [_outcome(self.infer_inline, *request) for request in requests]
        if not self.accepting:
            return [NotReady(f"model {self.name!r} is shutting down") for _ in requests]
        if not self.inline:
            raise RuntimeError(f"model {self.name!r} runs on its {self.dispatch_mode!r} executor, not inline")
        self.in_flight += len(requests)
        try:
            return run_together(self.pipeline, requests)
        finally:
            self.in_flight -= len(requests)

    def call(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        """One bare model call on arrays already shaped for it: no admission, validation or
        hand-off (what benchmarks compare the whole path against)."""
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
            batch_selection=self.batch_decision.report(),
            wide_selection=self.wide_choice.report(),
            precision_selection=self._precision_selection(),
            deadline_floor_ms=self.deadline_floor_ms,
        )

    def _precision_selection(self) -> dict[str, Any] | None:
        if self.options.precision == "fp32":
            return None
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
            wide_calls=0 if self.runtimes.wide is None else self.runtimes.wide.calls,
            abandoned=self.pipeline.abandoned,
            stopped_calls=self.pipeline.stopped,
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


def _outcome(infer: Callable[[object, float | None, str | None], Prediction], *request: object) -> Outcome:
    """A call's answer or the error it raised, as an outcome."""
    try:
        return infer(*request)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 -- this request's answer, raised again by its caller
        return exc
