"""One request path for every executor: prepare -> execute -> finish.

An unbatched request is a batch of one, so the inline executor, the worker threads and the
batcher all run the same three stages and answer with the same ``Prediction``:

- ``prepare`` (per request, on the thread that will run it): refuse it if its caller left or
  its deadline passed, run the handler's preprocess, check the inputs against the schema.
- ``execute`` (per batch): concatenate, one model call, then ``finish`` each request's rows:
  NaN/inf check, the handler's postprocess, one sample back without its batch dimension.
- ``release``: give the request's place in admission control back, exactly once.

Errors are outcomes, not exceptions: one request's bad input or handler failure answers only
that request; a model failure answers the whole batch. A ``BaseException`` from the model
(SystemExit & co) answers the batch with ``WorkerDied`` and is handed back to the executor,
which lets the thread that ran it die (and be replaced).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping

import numpy as np

from inferpool.engine.errors import DeadlineExceeded, EngineError, ModelFailed, WorkerDied
from inferpool.engine.requests import Coerce, Finish, Outcome, Prediction, Prepare, Run, Work, request_id
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(
        self,
        *,
        coerce: Coerce,
        run: Run,
        release: Callable[[int], None],
        check: Callable[[Mapping[str, Array]], None] | None = None,
        prepare: Prepare | None = None,
        finish: Finish | None = None,
    ) -> None:
        self._coerce, self._run, self._release, self._check = coerce, run, release, check
        self._preprocess, self._postprocess = prepare, finish

    def prepare(self, work: Work) -> BaseException | None:
        """Validate a request just taken up; the error to answer it with, or None if it can run."""
        work.dequeued = now = time.monotonic()
        future = work.future
        if future is not None and future.done():  # a racy read, but only an optimisation
            return DeadlineExceeded("the caller stopped waiting")
        if work.deadline is not None and now >= work.deadline:
            return DeadlineExceeded("the request's deadline passed while it was queued; it never ran")
        try:
            inputs = work.inputs
            if self._preprocess is not None:
                inputs, work.context = self._preprocess(inputs)
            work.arrays, work.single = self._coerce(inputs)
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
        try:
            if len(batch) == 1:
                arrays = batch[0].arrays
            else:
                arrays = {name: np.concatenate([w.arrays[name] for w in batch]) for name in batch[0].arrays}
            outputs = self._run(arrays)
            if len(batch) > 1 and any(out.shape[:1] != (rows,) for out in outputs.values()):
                raise ModelFailed(
                    f"the model returned {[out.shape for out in outputs.values()]} for a batch of {rows}; batching "
                    "needs every output's dimension 0 to be the batch: set max_batch_size=1 for this model"
                )
        except Exception as exc:  # noqa: BLE001 -- every request of the batch gets it
            return [_copy_error(exc) for _ in batch], None
        except BaseException as exc:  # noqa: BLE001 -- SystemExit & co: answer the batch, end the thread
            return [worker_died(exc) for _ in batch], exc
        finally:
            request_id.reset(token)
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

    def release(self, work: Work) -> None:
        self._release(work.estimate)

    def _finish(self, work: Work, outputs: dict[str, Array], timing: tuple[float, float, int, bool]) -> Outcome:
        """One request's rows -> its Prediction (or the error that only it gets)."""
        dispatched, finished, rows, formed = timing
        if work.single:
            outputs = {name: out[0] for name, out in outputs.items()}
        try:
            if self._check is not None:
                self._check(outputs)  # on its own rows: one bad sample fails only its request
            if self._postprocess is not None:
                outputs = self._postprocess(outputs, work.context)
        except Exception as exc:  # noqa: BLE001 -- this request's answer, not the batch's
            return _finish_failed(exc, work)
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


def _finish_failed(exc: Exception, work: Work) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    token = request_id.set(work.request_id)
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
