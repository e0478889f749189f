"""One request path for every executor: admit -> prepare -> execute -> finish -> release.

The pipeline holds what a request needs: the model's name and schema, its runtimes, admission
control (and through it the live call timings), the checks the options ask for and the model's
handler. An unbatched request is a batch of one, so the worker threads and the batcher run the
same stages and answer with the same ``Prediction``:

- ``admit`` (on the event loop): count the request's samples and let admission control take it
  or refuse it (inferpool.engine.serving.admission).
- ``prepare`` (per request, on the thread that will run it): refuse it if its caller left or
  its deadline passed, run the handler's preprocess, check the inputs against the schema.
- ``execute`` (per batch): concatenate, one model call, then ``finish`` each request's rows:
  NaN/inf check, the handler's postprocess, one sample back without its batch dimension. The
  call can be stopped midway once none of its callers waits (inferpool.engine.serving.call_stop).
- ``release``: give the request's place in admission control back, exactly once.

``inline`` runs all of it for the inline executor, on the event loop, in one go: there a call
runs to its end before the next request can start, so nothing is ever queued or counted, and
no ``Work`` or future is made (issue 35, docs/BENCHMARKS.md).

Errors are outcomes, not exceptions: one request's bad input or handler failure answers only
that request; a model failure answers the whole batch. A ``BaseException`` from the model
(SystemExit & co) answers the batch with ``WorkerDied`` and is handed back to the executor,
which lets the thread that ran it die (and be replaced).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from inferpool.engine.errors import (
    CallStopped,
    DeadlineBelowFloor,
    DeadlineExceeded,
    EngineError,
    InvalidInput,
    ModelFailed,
    WorkerDied,
)
from inferpool.engine.schema import Array, QuickInputs, Schema, positional
from inferpool.engine.serving.admission import Admission, SampleCount
from inferpool.engine.serving.call_stop import CallStop, running
from inferpool.engine.serving.faults import check_finite
from inferpool.engine.serving.requests import Outcome, Prediction, Work, request_id

if TYPE_CHECKING:
    from inferpool.engine.models.handlers import Handler
    from inferpool.engine.options import RuntimeOptions
    from inferpool.engine.plan.deadline_floor import DeadlineFloor

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What runs one model call (inferpool.engine.serving.runtime_set.RuntimeSet)."""

    def run(self, arrays: Mapping[str, Array]) -> dict[str, Array]: ...

    def alone_on_wide_lane(self) -> bool:
        """Whether a call starting now would run alone on every core (RuntimeSet's wide lane)."""
        ...


class Pipeline:
    def __init__(
        self, name: str, schema: Schema, runtimes: Runner, admission: Admission, options: RuntimeOptions,
        handler: Handler | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.schema = schema
        self.runtimes = runtimes
        self.admission = admission
        self.handler = handler
        self.strict = options.check_inputs
        self.check_outputs = options.check_outputs
        self.max_samples = options.max_request_samples
        self._count = handler.samples if handler is not None else SampleCount(schema)
        self._quick = QuickInputs.of(schema)
        self.outputs_as_run = not self.check_outputs and handler is None
        self.stackable = all(spec.batched for spec in (*schema.inputs, *schema.outputs))
        """Requests can share a call, stacked along dimension 0 (inferpool.engine.serving.inline_group);
        cleared for good if a stacked call's outputs say otherwise."""
        self.abandoned = 0
        """Requests dropped before they ran because their caller had stopped waiting (its client
        left, its deadline passed): a running total, for metrics."""
        self.stopped = 0
        """Model calls stopped midway because every request in them had stopped waiting
        (inferpool.engine.serving.call_stop): a running total, for metrics."""
        self._abandoned_lock = threading.Lock()  # worker threads count; a lost += would undercount
        self.floor: DeadlineFloor | None = None
        """The model's deadline floor per sample count, once measured (inferpool.engine.plan.deadline_floor)."""

    def admit(self, inputs: object, deadline: float | None, level: int = 0) -> int:
        """Count a request in for an executor that queues it; its samples (given back at release)."""
        samples = self.samples(inputs)
        if deadline is not None:
            self.check_floor(samples, deadline, time.monotonic())
        self.admission.admit(samples, deadline, self.name, level)
        return samples

    def inline(self, inputs: object, deadline: float | None, rid: str | None) -> Prediction:
        """The whole request on the event loop, for the inline executor; raises what it is answered with.

        What the queued path does and this one need not: admission's counts and estimate (no
        request is ever ahead of this one, so none can be refused for the wait, and none can
        exceed the capacity), a ``Work``, the call's timing for the estimate. The deadline is
        checked before and after (no timer can fire mid-call on the event loop)."""
        started = time.monotonic()
        token = request_id.set(rid) if rid is not None and request_id.get() != rid else None
        try:
            arrays, single, context = self.prepared(inputs, deadline, started)
            dispatched = time.monotonic()
            outputs = self.run(arrays)
            finished = time.monotonic()
            if single:
                outputs = {name: out[0] for name, out in outputs.items()}
            if not self.outputs_as_run:
                try:
                    outputs = self.checked_outputs(outputs, context)
                except Exception as exc:  # noqa: BLE001 -- as on the other paths: a 500 that names no internals
                    raise finish_failed(exc, rid or "-")  # noqa: B904 -- the cause is logged, not sent
        except (Exception, KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as exc:  # noqa: BLE001 -- SystemExit & co: on the event loop it would end the server
            raise worker_died(exc)  # noqa: B904 -- worker_died sets the cause
        finally:
            if token is not None:
                request_id.reset(token)
        if deadline is not None and finished > deadline:
            raise DeadlineExceeded(f"the request's deadline passed while model {self.name!r} ran it")
        rows = next(iter(arrays.values())).shape[0] if arrays else 1
        return Prediction(outputs, single, rows, 0.0, dispatched - started, finished - dispatched, 0.0, dispatched)

    def prepared(self, inputs: object, deadline: float | None, started: float) -> tuple[dict[str, Array], bool, object]:
        """An inline request's checks before its call (the sample count, refused before any
        conversion; the deadline and its floor; the handler's preprocess; the schema): its arrays,
        whether it was one sample without a batch dimension, and what the postprocess needs."""
        samples = self.samples(inputs)
        if deadline is not None:
            if deadline <= started:
                raise DeadlineExceeded(f"the request's deadline passed before model {self.name!r} got it")
            self.check_floor(samples, deadline, started)
        context: object = None
        if self.handler is not None:
            inputs, context = self.handler.preprocess(inputs)
        arrays, single = self.coerce(inputs)
        return arrays, single, context

    def check_floor(self, samples: int, deadline: float, now: float) -> None:
        # One sample's floor the front end holds before the body is read; more samples' only here.
        floor = self.floor
        if samples > 1 and floor is not None and deadline - now < floor.seconds(samples):
            raise DeadlineBelowFloor(samples, floor.ms(samples))

    def samples(self, inputs: object) -> int:
        samples = self._count(inputs)
        if samples > self.max_samples:
            raise InvalidInput(
                f"the request carries {samples} samples; model {self.name!r} takes at most "
                f"{self.max_samples} per request (max_request_samples): split it"
            )
        return samples

    def coerce(self, inputs: object) -> tuple[dict[str, Array], bool]:
        """Model inputs (after any preprocess) -> (arrays with a batch dimension, one sample without one?):
        the quick check where the schema allows it, the general one whenever it is not sure."""
        quick = self._quick
        if quick is not None:
            checked = quick(inputs)
            if checked is not None:
                return checked
        return self.schema.coerce_inputs(positional(self.schema, inputs), strict=self.strict)

    def call(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        """One model call, timed for admission control (``run`` says what it raises)."""
        started = time.perf_counter()
        outputs = self.run(arrays)
        rows = next(iter(arrays.values())).shape[0] if arrays else 1
        self.admission.times.observe(rows, time.perf_counter() - started)
        return outputs

    def run(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        """One model call; model exceptions become ModelFailed."""
        try:
            return self.runtimes.run(arrays)
        except EngineError:
            raise
        except Exception as exc:
            # Logged once here with the traceback; the caller gets a message without internals.
            log.exception("model %r failed on a request", self.name)
            raise ModelFailed(
                f"the model failed on this input ({type(exc).__name__}); the server log has the details"
            ) from exc

    def prepare(self, work: Work) -> BaseException | None:
        """Validate a request just taken up; the error to answer it with, or None if it can run."""
        work.dequeued = now = time.monotonic()
        future = work.future
        if future is not None and future.done():  # a racy read, but only an optimisation
            self._count_abandoned(1)
            return DeadlineExceeded("the caller stopped waiting")
        if work.deadline is not None and now >= work.deadline:
            return DeadlineExceeded("the request's deadline passed while it was queued; it never ran")
        try:
            inputs = work.inputs
            if self.handler is not None:
                inputs, work.context = self.handler.preprocess(inputs)
            work.arrays, work.single = self.coerce(inputs)
        except Exception as exc:  # noqa: BLE001 -- goes to this request's caller only
            return exc
        work.rows = next(iter(work.arrays.values())).shape[0] if work.arrays else 1
        work.validate = time.monotonic() - now
        work.inputs = None  # the arrays replace it; free the decoded JSON early
        return None

    def execute(self, batch: list[Work], formed: bool = False) -> tuple[list[Outcome], BaseException | None]:
        """Run prepared requests as one model call; one outcome per request, in order, and the
        BaseException that should end the calling thread, if any. ``formed``: the batcher held
        them to form a batch (their wait for it is reported as batch time)."""
        dispatched = time.monotonic()
        rows = sum(w.rows for w in batch)
        token = request_id.set(batch[0].request_id if len(batch) == 1 else ",".join(w.request_id for w in batch))
        switch = None
        if batch[0].future is not None:  # callers that can leave mid-call (an event loop's tasks)
            switch = CallStop(batch)
            if switch.nobody_waits():  # all left while the batch formed or waited for a runtime
                self._count_abandoned(len(batch))
                request_id.reset(token)
                return [DeadlineExceeded("the caller stopped waiting") for _ in batch], None
            for work in batch:
                work.stop = switch
            running(switch)
        try:
            if len(batch) == 1:
                arrays = batch[0].arrays
            else:
                arrays = {name: np.concatenate([w.arrays[name] for w in batch]) for name in batch[0].arrays}
            outputs = self.call(arrays)
            if len(batch) > 1 and any(out.shape[:1] != (rows,) for out in outputs.values()):
                raise ModelFailed(
                    f"the model returned {[out.shape for out in outputs.values()]} for a batch of {rows}; batching "
                    "needs every output's dimension 0 to be the batch: set max_batch_size=1 for this model"
                )
        except CallStopped as exc:  # nobody waits for these answers: nothing to copy or log
            with self._abandoned_lock:
                self.stopped += 1
            return [exc for _ in batch], None
        except Exception as exc:  # noqa: BLE001 -- every request of the batch gets it
            return [_copy_error(exc) for _ in batch], None
        except BaseException as exc:  # noqa: BLE001 -- SystemExit & co: answer the batch, end the thread
            return [worker_died(exc) for _ in batch], exc
        finally:
            request_id.reset(token)
            if switch is not None:
                running(None)
                # A late pull then reaches nothing, and no work -> switch -> batch cycle outlives the call.
                for work in batch:
                    work.stop = None
        finished = time.monotonic()
        timing = (dispatched, finished, rows, formed)
        if len(batch) == 1:
            return [self._finish(batch[0], outputs, timing)], None
        outcomes: list[Outcome] = []
        start = 0
        for work in batch:
            stop = start + work.rows
            outcomes.append(self._finish(work, {n: out[start:stop] for n, out in outputs.items()}, timing))
            start = stop
        return outcomes, None

    def one(self, work: Work) -> tuple[Outcome, BaseException | None]:
        """prepare + execute + release for a request that runs alone."""
        try:
            error = self.prepare(work)
            if error is not None:
                return error, None
            outcomes, died = self.execute([work])
            return outcomes[0], died
        except BaseException as exc:  # noqa: BLE001 -- a handler's SystemExit: answer, then end the thread
            return worker_died(exc), exc
        finally:
            self.release(work)

    def _count_abandoned(self, requests: int) -> None:
        with self._abandoned_lock:
            self.abandoned += requests

    def release(self, work: Work) -> None:
        self.admission.leave(work.estimate)

    def checked_outputs(self, outputs: dict[str, Array], context: object) -> dict[str, Array]:
        if self.check_outputs:
            check_finite(outputs)  # on its own rows: one bad sample fails only its request
        if self.handler is not None:
            return self.handler.postprocess(outputs, context)
        return outputs

    def _finish(self, work: Work, outputs: dict[str, Array], timing: tuple[float, float, int, bool]) -> Outcome:
        """One request's rows -> its Prediction (or the error that only it gets)."""
        dispatched, finished, rows, formed = timing
        if work.single:
            outputs = {name: out[0] for name, out in outputs.items()}
        try:
            outputs = self.checked_outputs(outputs, work.context)
        except Exception as exc:  # noqa: BLE001 -- this request's answer, not the batch's
            return finish_failed(exc, work.request_id)
        return Prediction(
            outputs=outputs,
            single=work.single,
            batch_size=rows,
            queue_seconds=work.dequeued - work.queued,
            validate_seconds=work.validate,
            compute_seconds=finished - dispatched,
            batch_seconds=max(0.0, dispatched - work.dequeued - work.validate) if formed else 0.0,
            dispatched=dispatched,
        )


def worker_died(exc: BaseException) -> WorkerDied:
    """The error a caller gets when the thread running its request dies of ``exc``."""
    died = WorkerDied(f"the worker thread running this request died ({type(exc).__name__}); it has been replaced")
    died.__cause__ = exc
    return died


def finish_failed(exc: Exception, rid: str) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    token = request_id.set(rid)
    try:
        log.exception("a model handler's postprocess failed")
    finally:
        request_id.reset(token)
    return ModelFailed(f"post-processing failed ({type(exc).__name__}); the server log has the details")


def _copy_error(exc: BaseException) -> BaseException:
    """One exception object per caller: each ``raise`` appends to its traceback."""
    if not isinstance(exc, EngineError):
        return exc
    clone = copy.copy(exc)
    clone.__cause__ = exc.__cause__
    return clone
