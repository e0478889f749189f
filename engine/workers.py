"""Hand-off from the asyncio event loop to inference threads, kept as cheap as possible.

Each job is one ``SimpleQueue.put`` (a C call that wakes exactly one sleeping worker) and
one ``call_soon_threadsafe`` back to the loop; no executor bookkeeping, no
``concurrent.futures`` wrapper, no per-call thread-name or context copying. The workers are
long-lived, so their thread-local caches (OpenMP teams, allocator arenas) stay warm. A
worker that dies is replaced (``ThreadSet``); the batcher's workers use the same set.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from contextvars import copy_context
from functools import partial
from queue import SimpleQueue
from typing import Any, TypeVar

from engine.errors import WorkerDied

R = TypeVar("R")
log = logging.getLogger(__name__)

_Job = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


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


class WorkerThreads:
    def __init__(
        self, count: int, name: str = "inferpool-worker", initializer: Callable[[], object] | None = None
    ) -> None:
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self.threads = ThreadSet(count, name, self._work, initializer)

    @property
    def count(self) -> int:
        return self.threads.count

    @property
    def alive(self) -> int:
        return self.threads.alive

    @property
    def replaced(self) -> int:
        return self.threads.replaced

    async def run(self, fn: Callable[[], R]) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        # The caller's context (request id for logs, ...) travels with the job: O(1) to copy.
        self._jobs.put((partial(copy_context().run, fn), future, loop))
        return await future

    def run_on_each(self, fn: Callable[[], object], timeout: float = 60.0) -> None:
        """Run ``fn`` once on every worker thread (e.g. to warm per-thread state), blocking."""
        barrier = threading.Barrier(self.count + 1)
        errors: list[BaseException] = []

        def once() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
                errors.append(exc)
            # Holding every worker at the barrier guarantees each one ran ``fn`` exactly once.
            barrier.wait(timeout)

        for _ in range(self.count):
            self._jobs.put((once, None, None))  # type: ignore[arg-type]
        barrier.wait(timeout)
        if errors:
            raise errors[0]

    def close(self, timeout: float = 5.0) -> None:
        self.threads.closing = True
        for _ in range(self.count):
            self._jobs.put(None)
        self.threads.join(timeout)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future, loop = job
            try:
                result = fn()
            except Exception as exc:
                if future is not None:
                    _complete(loop, future.set_exception, future, exc)
                else:
                    log.exception("background job failed")
            except BaseException as exc:
                # SystemExit and the like end this thread (ThreadSet replaces it). The caller
                # gets a plain error: a SystemExit set on its future would stop the event loop.
                if future is not None:
                    _complete(loop, future.set_exception, future, worker_died(exc))
                raise
            else:
                if future is not None:
                    _complete(loop, future.set_result, future, result)


def worker_died(exc: BaseException) -> WorkerDied:
    """The error a caller gets when the thread running its request dies of ``exc``."""
    died = WorkerDied(f"the worker thread running this request died ({type(exc).__name__}); it has been replaced")
    died.__cause__ = exc
    return died


def _complete(
    loop: asyncio.AbstractEventLoop, setter: Callable[[Any], None], future: asyncio.Future[Any], value: object
) -> None:
    with suppress(RuntimeError):  # the loop closed while we ran: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, setter, future, value)


def _settle(setter: Callable[[Any], None], future: asyncio.Future[Any], value: object) -> None:
    if not future.done():  # the request may have been cancelled (client gone, deadline)
        setter(value)
