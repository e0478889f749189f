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
when waiting longer would break the earliest deadline in it, or at once when a request in it
already carries several samples (it is a batch: it never waits for others). Due groups run earliest-due
first, so no shape can starve another; with request priorities, groups form per level too and the
highest level's run first (inferpool.engine.serving.priorities). With ``wait_for_company = "auto"``
a partial group waits only while waiting has been filling batches (inferpool.engine.executors.patience).

A worker that dies (SystemExit from the model, an exception escaping the loop) first answers
every request it holds with ``WorkerDied``, then ``ThreadSet`` starts its replacement.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from queue import Empty

from inferpool.engine.errors import NotReady
from inferpool.engine.executors.base import ExecutorConfig
from inferpool.engine.executors.patience import Patience
from inferpool.engine.executors.threads import QueuedWorkers
from inferpool.engine.serving.pipeline import Pipeline, worker_died
from inferpool.engine.serving.requests import Prediction, Work, deliver


class Batcher(QueuedWorkers):
    """The ``batch`` executor (inferpool.engine.executors)."""

    def __init__(self, pipeline: Pipeline, config: ExecutorConfig) -> None:
        self.max_batch_size = config.max_batch_size
        self.max_delay = config.max_delay
        # wait_for_company "auto": waits that stop paying stop (patience.py); "on" always waits.
        self._patience = Patience(config.inline_when_idle) if config.adaptive_wait and config.max_delay > 0 else None
        self._idle_inline = self._patience if config.inline_when_idle else None
        self.preferred = frozenset(config.preferred)
        self._call_seconds = config.call_seconds
        self._leader = threading.Lock()
        # Requests taken off the queue: partial batches by per-sample shape, waiting for company,
        # and full batches waiting for a worker. Only the leader touches them; they outlive any
        # one thread, so a worker that dies leaves them intact for the next leader.
        self._groups: dict[_Shapes, _Group] = {}
        self._ready: list[_Group] = []
        super().__init__(pipeline, config)  # starts the threads: everything above must exist

    async def infer(self, inputs: object, deadline: float | None, request_id: str | None, level: int = 0) -> Prediction:
        # Nothing queued, forming or running (each counts until released), and requests are
        # admitted only on this event loop, which this call holds: every runtime is free, and if
        # waits have stopped paying, the hand-off to a worker would be all the cost.
        patience = self._idle_inline
        if patience is not None and self.pipeline.admission.requests == 0:
            started = time.perf_counter()
            if patience.inline():
                formed = time.perf_counter() - started
                prediction = self.pipeline.inline(inputs, deadline, request_id)
                # Formed at once, and still observed: inferpool_batch_formation_seconds counts
                # every request while batching is on (a zero would read as batching off).
                prediction.batch_seconds = max(formed, 1e-9)
                return prediction
        return await super().infer(inputs, deadline, request_id, level)

    def alone(self, inputs: object, deadline: float | None, request_id: str | None) -> Prediction:
        prediction = super().alone(inputs, deadline, request_id)
        prediction.batch_seconds = 1e-9  # formed at once, and observed as the idle inline path's are
        return prediction

    def _closed(self) -> None:
        for group in (*self._ready, *self._groups.values()):  # never leave a caller hanging
            for work in group.requests:
                self.pipeline.release(work)
            deliver((work, NotReady("the model is shutting down")) for work in group.requests)
        self._ready.clear()
        self._groups.clear()

    def _work(self) -> None:
        # Filled in place by _form, so that if this thread dies mid-formation the requests it
        # took are still answered (and counted out of admission) before ThreadSet replaces it.
        batch: list[Work] = []
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

    def _abandon(self, requests: list[Work], exc: BaseException) -> None:
        for work in requests:
            self.pipeline.release(work)
        deliver((work, worker_died(exc)) for work in requests)

    def _form(self, batch: list[Work]) -> bool:
        """Put the next batch to run into ``batch``; True if a shutdown sentinel was taken.

        What is already queued is taken first, until a batch is full: a request that waited
        in the queue longer than ``max_delay`` (the workers were busy) is due at once, and
        must not run alone while its companions sit in the queue behind it; but a full batch
        cannot grow, so it does not wait for the rest of the queue to be validated (which,
        with a slow preprocess, would delay the first batch by the whole queue's validation;
        docs/BENCHMARKS.md). Then the earliest-due batch among
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
                    chosen = min((*ready, *due), key=_order)
                    full = chosen in ready
                    if full:
                        ready.remove(chosen)
                    else:
                        del groups[chosen.key]
                    if chosen.waited and self._patience is not None:
                        self._patience.found(full)  # a wait pays only if the batch filled
                    batch.extend(chosen.requests)
                    return False
                if groups and self._patience is not None and not self._patience.waits():
                    chosen = min(groups.values(), key=_order)  # waiting has found nobody lately
                    del groups[chosen.key]
                    batch.extend(chosen.requests)
                    return False
                timeout = min(g.due for g in groups.values()) - now if groups else None
                for forming in groups.values():
                    forming.waited = True
                try:
                    request = self._queue.get(timeout=timeout)
                except Empty:
                    continue  # a group is due now
            if request is None:
                return True
            if not self._prepare(request):
                continue
            key = (request.level, tuple(a.shape[1:] for a in request.arrays.values()))
            group = groups.get(key)
            if group is not None and group.rows + request.rows > self.max_batch_size:
                ready.append(groups.pop(key))  # full: this request starts the shape's next batch
                group = None
            if group is None:
                group = groups[key] = _Group(key, [], 0, request.queued + self.max_delay)
            group.add(request, self._call_seconds(self.max_batch_size))
            if group.rows >= self.max_batch_size or group.rows in self.preferred:
                ready.append(groups.pop(key))

    def _prepare(self, work: Work) -> bool:
        """Validate a newly taken request; False if it was answered instead (expired, caller
        gone, invalid input)."""
        try:
            error = self.pipeline.prepare(work)
        except BaseException as exc:  # the thread dies (and is replaced); the caller hears why
            self._abandon([work], exc)
            raise
        if error is None:
            return True
        self.pipeline.release(work)
        deliver([(work, error)])
        return False

    def _execute(self, batch: list[Work]) -> None:
        outcomes, died = self.pipeline.execute(batch, formed=True)
        for work in batch:
            self.pipeline.release(work)
        deliver(zip(batch, outcomes, strict=True))
        if died is not None:
            raise died


_Shapes = tuple[int, tuple[tuple[int, ...], ...]]
"""A group's key: its requests' priority level and per-sample shapes."""


@dataclass(slots=True, eq=False)
class _Group:
    """Requests of one per-sample shape waiting to run together."""

    key: _Shapes
    requests: list[Work]
    rows: int
    due: float
    """When the group must run: its first request's queue time + max_delay, or earlier for a deadline."""
    waited: bool = False
    """The leader waited for company while it formed (inferpool.engine.executors.patience)."""

    @property
    def level(self) -> int:
        return self.key[0]

    def add(self, request: Work, call_seconds: float) -> None:
        self.requests.append(request)
        self.rows += request.rows
        if request.rows > 1:  # already a batch: joined by what is queued, but it waits for nobody
            self.due = min(self.due, request.queued)
        if request.deadline is not None:
            # Leave room for the call itself (as if full: dispatching a bit early is harmless).
            self.due = min(self.due, request.deadline - call_seconds)


def _order(group: _Group) -> tuple[int, float]:
    """Which group runs first: the highest priority level (0, none named, counts as 1), then the
    earliest due (first come, first served across shapes, so none starves within a level)."""
    return max(group.level, 1), group.due
