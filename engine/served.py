"""ServedModel: the engine's narrow API for a front end.

One InferenceModule, a RuntimePool built from it, and the worker threads that borrow from the
pool. The service calls ``await model.infer(inputs)`` and never sees torch.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch

from engine.backends import BACKENDS, Runtime
from engine.dispatch import Dispatch, InlineDispatch
from engine.errors import ConfigError, EngineError, ModelFailed, NotReady, Overloaded
from engine.module import InferenceModule
from engine.options import RuntimeOptions
from engine.pool import RuntimePool
from engine.schema import Array, Schema, positional
from engine.sources import load_model
from engine.threads import ThreadPlan, apply_thread_plan, init_worker_thread, plan_threads
from engine.workers import WorkerThreads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prediction:
    outputs: dict[str, Array]
    single: bool
    """The request was one sample without a batch dimension; so are ``outputs``."""
    batch_size: int
    queue_seconds: float
    """From submission until a worker picked the request up."""
    validate_seconds: float
    """Checking the inputs against the schema and converting them to arrays."""
    compute_seconds: float
    """Borrowing a runtime and running the model."""


class ServedModel:
    def __init__(self, module: InferenceModule, options: RuntimeOptions, plan: ThreadPlan, max_queue: int) -> None:
        try:
            backend = BACKENDS[options.backend]
        except KeyError:
            raise ConfigError(f"backend {options.backend!r} is unknown; choose one of {sorted(BACKENDS)}") from None
        self.module = module
        self.options = options
        self.plan = plan
        self.max_queue = max_queue
        compiled = backend.compile(module, options)
        runtimes = [backend(module, options, compiled) for _ in range(plan.runtimes)]
        for runtime in runtimes:
            runtime.warmup()
        self.pool: RuntimePool[Runtime] = RuntimePool(runtimes, timeout=options.borrow_timeout)
        mode = options.dispatch
        if mode == "auto":
            mode = "inline" if self.time_example_call() * 1e6 < options.inline_below_us else "threads"
        self.dispatch_mode = mode
        dispatchers: dict[str, Callable[[], Dispatch]] = {"inline": InlineDispatch, "threads": self._start_workers}
        self.dispatch = dispatchers[mode]()
        self.in_flight = 0
        self.accepting = True

    def _start_workers(self) -> WorkerThreads:
        workers = WorkerThreads(
            self.plan.runtimes, name=f"{self.name}-worker", initializer=partial(init_worker_thread, self.plan)
        )
        # Warm each worker thread too: per-thread state (OpenMP team, allocator) is lazy.
        if self.options.warmup_iters:
            workers.run_on_each(lambda: self._run(self.module.example_inputs))
        return workers

    def time_example_call(self, repeats: int = 5) -> float:
        """Median seconds of a warm call on the example inputs."""
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            self._run(self.module.example_inputs)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    @classmethod
    def load(cls, source: str, options: RuntimeOptions, *, max_queue: int = 64, processes: int = 1) -> ServedModel:
        plan = plan_threads(options, processes=processes)
        apply_thread_plan(plan)
        started = time.perf_counter()
        module = InferenceModule.from_spec(load_model(source))
        served = cls(module, options, plan, max_queue)
        log.info(
            "model %r ready in %.2fs: backend=%s dispatch=%s runtimes=%d intra_op_threads=%d usable_cpus=%d "
            "parameters=%d",
            module.name, time.perf_counter() - started, options.backend, served.dispatch_mode, plan.runtimes,
            plan.intra_op_threads, plan.cpus, module.num_parameters,
        )  # fmt: skip
        return served

    @property
    def name(self) -> str:
        return self.module.name

    @property
    def schema(self) -> Schema:
        return self.module.schema

    async def infer(self, inputs: object) -> Prediction:
        """Validate and run one request on a worker thread; raises InvalidInput/Overloaded."""
        if not self.accepting:
            raise NotReady(f"model {self.name!r} is shutting down")
        # Only the event loop touches in_flight, so a plain int is race-free.
        if self.in_flight >= self.max_queue + self.plan.runtimes:
            raise Overloaded(f"{self.in_flight} requests are already in flight for model {self.name!r}")
        self.in_flight += 1
        try:
            return await self.dispatch.run(partial(self._predict, inputs, time.perf_counter()))
        finally:
            self.in_flight -= 1

    def _predict(self, inputs: object, queued_at: float) -> Prediction:
        dequeued = time.perf_counter()
        arrays, single = self.schema.coerce_inputs(positional(self.schema, inputs), strict=self.options.check_inputs)
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
        finished = time.perf_counter()
        batch = next(iter(arrays.values())).shape[0] if arrays else 1
        if single:
            outputs = {name: array[0] for name, array in outputs.items()}
        return Prediction(outputs, single, batch, dequeued - queued_at, started - dequeued, finished - started)

    def _run(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        with self.pool.borrow() as runtime:
            return runtime.run(arrays)

    def describe(self) -> dict[str, str]:
        """How this model is being served, for logs and the info metric."""
        return {
            "model": self.name,
            "backend": self.options.backend,
            "dispatch": self.dispatch_mode,
            "runtimes": str(self.plan.runtimes),
            "intra_op_threads": str(self.plan.intra_op_threads),
            "usable_cpus": str(self.plan.cpus),
            "torch_version": torch.__version__,
        }

    @property
    def busy_runtimes(self) -> int:
        return self.pool.size - self.pool.idle

    def close(self) -> None:
        self.accepting = False
        self.dispatch.close()
