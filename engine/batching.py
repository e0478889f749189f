"""Dynamic batching: concurrent requests concatenated along dim 0 into one model call.

Leader/follower on the worker threads, no extra batcher thread: one worker at a time (the
leader, holding ``_leader``) takes requests off a ``SimpleQueue`` and forms a batch; when it
dispatches, it releases the lock and runs the batch on one borrowed runtime while the next
idle worker becomes leader and forms the next batch from whatever queued meanwhile. Under
load batches therefore fill from the queue without any waiting, and a request costs the same
hand-off as unbatched dispatch (one ``SimpleQueue.put``, one ``call_soon_threadsafe`` -- per
batch and event loop, not per request). A dedicated batcher thread would add a second
thread hop per request on a 2-core machine.

Requests are grouped by per-sample shape (a text model's sequence-length bucket, say): each
shape forms its own batch, so that a stream alternating between two shapes still batches
instead of closing a batch at every change (MiniLM at 16 clients: batches of 2.5-4.6 of 16 when
any change of shape closed the batch). A group runs when it reaches ``max_batch_size`` or a
preferred size, when the next request of its shape does not fit (that request starts the
group's next batch), when its first request has waited ``max_delay`` since it was queued, or
when waiting longer would break the earliest deadline in it. Due groups run earliest-due
first, so no shape can starve another.

A worker that dies (SystemExit from the model, an exception escaping the loop) first answers
every request it holds with ``WorkerDied``, then ``ThreadSet`` starts its replacement.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from queue import Empty, SimpleQueue

import numpy as np

from engine.errors import DeadlineExceeded, EngineError, ModelFailed, NotReady
from engine.requests import Coerce, Finish, Prediction, Prepare, Request, Run
from engine.schema import Array
from engine.workers import ThreadSet, worker_died

log = logging.getLogger(__name__)


_Settle = tuple["asyncio.Future[Prediction]", "Prediction | BaseException"]


class Batcher:
    def __init__(
        self,
        *,
        threads: int,
        name: str,
        max_batch_size: int,
        max_delay: float,
        preferred: tuple[int, ...],
        coerce: Coerce,
        run: Run,
        done: Callable[[int], None],
        call_seconds: Callable[[int], float],
        initializer: Callable[[], object],
        check: Callable[[Mapping[str, Array]], None] | None = None,
        prepare: Prepare | None = None,
        finish: Finish | None = None,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.max_delay = max_delay
        self.preferred = frozenset(preferred)
        self._coerce, self._run, self._done, self._call_seconds = coerce, run, done, call_seconds
        self._check = check
        self._prepare_hook, self._finish = prepare, finish
        self._queue: SimpleQueue[Request | None] = SimpleQueue()
        self._leader = threading.Lock()
        # Requests taken off the queue: partial batches by per-sample shape, waiting for company,
        # and full batches waiting for a worker. Only the leader touches them; they outlive any
        # one thread, so a worker that dies leaves them intact for the next leader.
        self._groups: dict[_Shapes, _Group] = {}
        self._ready: list[_Group] = []
        self._threads = ThreadSet(threads, name, self._work, initializer)
        try:
            self._threads.wait_started(120)  # per-thread warm-up runs in the initializer: ready means warm
        except BaseException:
            self.close()
            raise

    @property
    def count(self) -> int:
        return self._threads.count

    @property
    def alive(self) -> int:
        return self._threads.alive

    @property
    def replaced(self) -> int:
        return self._threads.replaced

    def submit(self, inputs: object, estimate: int, deadline: float | None) -> asyncio.Future[Prediction]:
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        self._queue.put(Request(inputs, estimate, deadline, future))
        return future

    def close(self, timeout: float = 5.0) -> None:
        self._threads.closing = True
        for _ in range(self._threads.count):
            self._queue.put(None)
        self._threads.join(timeout)
        for group in (*self._ready, *self._groups.values()):  # never leave a caller hanging
            for r in group.requests:
                _settle_all(r.loop, [(r.future, NotReady("the model is shutting down"))])
        self._ready.clear()
        self._groups.clear()

    def _work(self) -> None:
        # Filled in place by _form, so that if this thread dies mid-formation the requests it
        # took are still answered (and counted out of admission) before ThreadSet replaces it.
        batch: list[Request] = []
        try:
            stop = False
            while not stop:
                with self._leader:
                    stop = self._form(batch)
                if batch:
                    taken, batch = batch, []
                    self._execute(taken)  # answers its whole batch, even when the thread dies in it
        except BaseException as exc:
            self._abandon(batch, exc)
            raise

    def _abandon(self, requests: list[Request], exc: BaseException) -> None:
        for r in requests:
            self._done(r.estimate)
            _settle_all(r.loop, [(r.future, worker_died(exc))])

    def _form(self, batch: list[Request]) -> bool:
        """Put the next batch to run into ``batch``; True if a shutdown sentinel was taken.

        What is already queued is taken first, until a batch is full: a request that waited
        in the queue longer than ``max_delay`` (the workers were busy) is due at once, and
        must not run alone while its companions sit in the queue behind it; but a full batch
        cannot grow, so it does not wait for the rest of the queue to be validated (that
        delayed the first batch of 40 queued requests from 11 to 207 ms with a 5 ms
        preprocess). Then the earliest-due batch among
        the full ones and the due partial ones runs (first come, first served across shapes,
        so none starves); if none is due, the leader waits for more requests until one is.
        """
        ready, groups = self._ready, self._groups
        while True:
            try:
                if ready:  # a full batch cannot grow: choose now, let the next leader drain on
                    raise Empty
                request = self._queue.get(block=False)
            except Empty:
                now = time.monotonic()
                due = [g for g in groups.values() if g.due <= now]
                if ready or due:
                    chosen = min((*ready, *due), key=lambda g: g.due)
                    if chosen in ready:
                        ready.remove(chosen)
                    else:
                        del groups[chosen.key]
                    batch.extend(chosen.requests)
                    return False
                timeout = min(g.due for g in groups.values()) - now if groups else None
                try:
                    request = self._queue.get(timeout=timeout)
                except Empty:
                    continue  # a group is due now
            if request is None:
                return True
            if not request.arrays and not self._prepare(request):
                continue
            key = tuple(a.shape[1:] for a in request.arrays.values())
            group = groups.get(key)
            if group is not None and group.rows + request.rows > self.max_batch_size:
                ready.append(groups.pop(key))  # full: this request starts the shape's next batch
                group = None
            if group is None:
                group = groups[key] = _Group(key, [], 0, request.queued + self.max_delay)
            group.add(request, self._call_seconds(self.max_batch_size))
            if group.rows >= self.max_batch_size or group.rows in self.preferred:
                ready.append(groups.pop(key))

    def _prepare(self, request: Request) -> bool:
        """Validate a newly taken request; False if it was answered instead (expired, caller
        gone, invalid input)."""
        request.dequeued = now = time.monotonic()
        error: BaseException | None = None
        if request.future.done():  # the caller stopped waiting (a racy read, but only an optimisation)
            error = DeadlineExceeded("the caller stopped waiting")
        elif request.deadline is not None and now >= request.deadline:
            error = DeadlineExceeded("the request's deadline passed while it was queued; it never ran")
        else:
            try:
                inputs = request.inputs
                if self._prepare_hook is not None:
                    inputs, request.context = self._prepare_hook(inputs)
                request.arrays, request.single = self._coerce(inputs)
                request.rows = next(iter(request.arrays.values())).shape[0]
                request.validate = time.monotonic() - now
                request.inputs = None  # the arrays replace it; free the decoded JSON early
                return True
            except Exception as exc:  # noqa: BLE001 -- goes to this request's caller only
                error = exc
            except BaseException as exc:  # the thread dies (and is replaced); the caller hears why
                self._abandon([request], exc)
                raise
        self._done(request.estimate)
        _settle_all(request.loop, [(request.future, error)])
        return False

    def _execute(self, batch: list[Request]) -> None:
        dispatched = time.monotonic()
        rows = sum(r.rows for r in batch)
        results: list[_Settle] = []
        died: BaseException | None = None
        try:
            if len(batch) == 1:
                arrays = batch[0].arrays
            else:
                arrays = {name: np.concatenate([r.arrays[name] for r in batch]) for name in batch[0].arrays}
            outputs = self._run(arrays)
            if any(out.shape[:1] != (rows,) for out in outputs.values()):
                raise ModelFailed(
                    f"the model returned {[out.shape for out in outputs.values()]} for a batch of {rows}; batching "
                    "needs every output's dimension 0 to be the batch: set max_batch_size=1 for this model"
                )
        except Exception as exc:  # noqa: BLE001 -- every request of the batch gets it
            results = [(r.future, _copy_error(exc)) for r in batch]
        except BaseException as exc:  # noqa: BLE001 -- SystemExit & co: answer the batch, then let the thread die
            died = exc
            results = [(r.future, worker_died(exc)) for r in batch]
        else:
            finished = time.monotonic()
            start = 0
            for r in batch:
                stop = start + r.rows
                mine = {name: out[start] if r.single else out[start:stop] for name, out in outputs.items()}
                start = stop
                if self._check is not None:
                    # Per request, on its own rows: one bad sample fails only the request it is in.
                    try:
                        self._check(mine)
                    except ModelFailed as exc:
                        results.append((r.future, exc))
                        continue
                if self._finish is not None:
                    try:
                        mine = self._finish(mine, r.context)
                    except Exception as exc:  # noqa: BLE001 -- this request's handler failed, not the batch
                        results.append((r.future, _handler_failed(exc)))
                        continue
                prediction = Prediction(
                    outputs=mine,
                    single=r.single,
                    batch_size=rows,
                    queue_seconds=r.dequeued - r.queued,
                    validate_seconds=r.validate,
                    compute_seconds=finished - dispatched,
                    batch_seconds=dispatched - r.dequeued - r.validate,
                )
                results.append((r.future, prediction))
        for r in batch:
            self._done(r.estimate)
        by_loop: dict[asyncio.AbstractEventLoop, list[_Settle]] = {}
        for r, item in zip(batch, results, strict=True):
            by_loop.setdefault(r.loop, []).append(item)
        for loop, items in by_loop.items():
            _settle_all(loop, items)
        if died is not None:
            raise died


_Shapes = tuple[tuple[int, ...], ...]


@dataclass(slots=True, eq=False)
class _Group:
    """Requests of one per-sample shape waiting to run together."""

    key: _Shapes
    requests: list[Request]
    rows: int
    due: float
    """When the group must run: its first request's queue time + max_delay, or earlier for a deadline."""

    def add(self, request: Request, call_seconds: float) -> None:
        self.requests.append(request)
        self.rows += request.rows
        if request.deadline is not None:
            # Leave room for the call itself (as if full: dispatching a bit early is harmless).
            self.due = min(self.due, request.deadline - call_seconds)


def _handler_failed(exc: Exception) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    log.exception("a model handler's postprocess failed")
    return ModelFailed(f"post-processing failed ({type(exc).__name__}); the server log has the details")


def _copy_error(exc: BaseException) -> BaseException:
    """One exception object per caller: each ``raise`` appends to its traceback."""
    if not isinstance(exc, EngineError):
        return exc
    clone = copy.copy(exc)
    clone.__cause__ = exc.__cause__
    return clone


def _settle_all(loop: asyncio.AbstractEventLoop, items: list[_Settle]) -> None:
    with suppress(RuntimeError):  # the loop closed while we ran: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[_Settle]) -> None:
    for future, value in items:
        if future.done():  # the caller stopped waiting (deadline, client gone)
            continue
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
