"""Long-lived inference threads that replace themselves when one dies (``ThreadSet``), fed
from one queue of requests (``QueuedWorkers``: the ``threads`` executor here, and the batcher)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Protocol

from inferpool.engine.errors import DeadlineExceeded, NotReady
from inferpool.engine.executors.base import ExecutorConfig
from inferpool.engine.serving.pipeline import Pipeline
from inferpool.engine.serving.priorities import LeveledQueue
from inferpool.engine.serving.requests import Prediction, Work, deliver

log = logging.getLogger(__name__)


class ThreadSet:
    """A fixed number of long-lived threads running ``work``; one that dies is replaced.

    A thread dies when ``work`` raises instead of returning (an exception that escaped its
    loop, or a BaseException such as SystemExit from a job, which should end the thread that
    ran it). The dying thread logs the cause and starts its own replacement before it exits,
    so the set stays at full strength without a monitor thread polling. A thread whose
    ``initializer`` fails is not replaced (its replacement would fail the same way, forever):
    ``alive`` stays below ``count``, which is what readiness reports.
    """

    def __init__(
        self, count: int, name: str, work: Callable[[], None], initializer: Callable[[], object] | None = None
    ) -> None:
        self.name = name
        self.closing = False
        self.replaced = 0
        """Threads started to replace dead ones, for metrics."""
        self.init_errors: list[BaseException] = []
        self._work = work
        self._initializer = initializer
        self._started = threading.Semaphore(0)  # released once per thread when its initializer finished
        self._serial = itertools.count(count)  # replacement names: name-2, name-3, ... never reused
        self._lock = threading.Lock()  # dying threads only: counting replacements
        self._threads = [self._new(i, f"{name}-{i}", first=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    @property
    def count(self) -> int:
        return len(self._threads)

    @property
    def alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def wait_started(self, timeout: float) -> None:
        """Block until every first-generation thread ran its initializer; raise the first
        initializer error, if any."""
        deadline = time.monotonic() + timeout
        for _ in self._threads:
            if not self._started.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{self.name} threads did not start within {timeout:g}s")
        if self.init_errors:
            raise self.init_errors[0]

    def join(self, timeout: float) -> None:
        self.closing = True
        for thread in list(self._threads):
            thread.join(timeout)

    def _new(self, slot: int, name: str, *, first: bool = False) -> threading.Thread:
        return threading.Thread(target=self._main, args=(slot, first), name=name, daemon=True)

    def _main(self, slot: int, first: bool) -> None:
        try:
            if self._initializer is not None:
                self._initializer()
        except BaseException as exc:  # reported by wait_started, or logged here
            self.init_errors.append(exc)
            log.exception("thread %s failed to initialise; it is not replaced", threading.current_thread().name)
            return
        finally:
            if first:  # replacements start after wait_started, which must count only the first ones
                self._started.release()
        try:
            self._work()
        except BaseException:  # the thread ends here either way: say why, then replace it
            if self.closing:
                return
            log.exception("thread %s died; starting a replacement", threading.current_thread().name)
            self._replace(slot)

    def _replace(self, slot: int) -> None:
        thread = self._new(slot, f"{self.name}-{next(self._serial)}")
        try:
            thread.start()
        except RuntimeError:  # can't start new thread: leave the slot dead, so that alive < count
            log.exception("cannot replace a dead %s thread", self.name)
            return
        # Started before it takes the slot, so that ``alive`` never dips while we swap.
        self._threads[slot] = thread
        with self._lock:
            self.replaced += 1


class WorkQueue(Protocol):
    """What the workers take requests from: a ``SimpleQueue``, or with priorities a ``LeveledQueue``."""

    def put(self, item: Work | None, /) -> None: ...
    def get(self, block: bool = True, timeout: float | None = None) -> Work | None: ...


class QueuedWorkers:
    """An executor's worker threads, fed from one queue; subclasses say what a thread does
    (``_work``) and what to answer at close besides the queue (``_closed``)."""

    def __init__(self, pipeline: Pipeline, config: ExecutorConfig) -> None:
        self.pipeline = pipeline
        levels = pipeline.admission.levels
        self._queue: WorkQueue = LeveledQueue[Work](levels) if levels > 1 else SimpleQueue()
        self._threads = ThreadSet(config.threads, config.name, self._work, config.initializer)
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

    async def infer(self, inputs: object, deadline: float | None, request_id: str | None, level: int = 0) -> Prediction:
        pipeline = self.pipeline
        if pipeline.admission.requests == 0 and pipeline.runtimes.alone_on_wide_lane():
            return self.alone(inputs, deadline, request_id)
        samples = pipeline.admit(inputs, deadline, level)
        pending = self.run(Work(inputs, samples, deadline, request_id, level))
        if deadline is None:
            return await pending
        # asyncio.timeout cancels only this task's wait (no extra task, unlike wait_for); the
        # worker sees the cancelled future and drops the answer; the runtime goes back as usual.
        timeout = asyncio.timeout(deadline - time.monotonic())
        try:
            async with timeout:
                return await pending
        except TimeoutError:
            if not timeout.expired():
                raise
            raise DeadlineExceeded(f"the request's deadline passed while model {pipeline.name!r} ran it") from None

    def alone(self, inputs: object, deadline: float | None, request_id: str | None) -> Prediction:
        """A request that finds nothing queued or running in this process, nor any call running
        in the pod, and the wide lane free: it runs on the event loop, on every core. Handing it
        to a worker thread and back costs ~0.1 ms and two wake-ups while the loop has nothing
        else to do (one stream of ResNet-50 images: p50 8.42 against 8.71 ms); a request that
        arrives meanwhile waits for the call instead of running beside it, narrow, on the cores
        the lane is using."""
        return self.pipeline.inline(inputs, deadline, request_id)

    async def run(self, work: Work) -> Prediction:
        future = work.attach(asyncio.get_running_loop())
        self._queue.put(work)
        try:
            return await future
        except asyncio.CancelledError:  # its client left, or its deadline passed (asyncio.timeout)
            work.left()
            raise

    def close(self, timeout: float = 5.0) -> None:
        """Run what is queued, then stop; what the threads could not reach in ``timeout`` is
        answered NotReady (never a caller left hanging)."""
        self._threads.closing = True
        for _ in range(self._threads.count):
            self._queue.put(None)
        self._threads.join(timeout)
        refuse_queued(self._queue, self.pipeline)
        self._closed()

    def _work(self) -> None:
        raise NotImplementedError

    def _closed(self) -> None:
        pass


def refuse_queued(queue: WorkQueue, pipeline: Pipeline) -> None:
    """Answer NotReady to every request still queued after an executor's threads stopped."""
    sentinels = 0
    while True:
        try:
            work = queue.get(block=False)
        except Empty:
            break
        if work is None:
            sentinels += 1
        else:
            pipeline.release(work)
            deliver([(work, NotReady("the model is shutting down"))])
    for _ in range(sentinels):  # a thread still finishing its call must find its stop sign
        queue.put(None)


class ThreadExecutor(QueuedWorkers):
    """The ``threads`` executor: each worker runs one request at a time, start to end."""

    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            outcome, died = self.pipeline.one(work)
            deliver([(work, outcome)])
            if died is not None:
                raise died  # this thread ends; ThreadSet starts its replacement
