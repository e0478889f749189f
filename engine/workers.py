"""Hand-off from the asyncio event loop to inference threads, kept as cheap as possible.

Each job is one ``SimpleQueue.put`` (a C call that wakes exactly one sleeping worker) and
one ``call_soon_threadsafe`` back to the loop; no executor bookkeeping, no
``concurrent.futures`` wrapper, no per-call thread-name or context copying. The workers are
long-lived, so their thread-local caches (OpenMP teams, allocator arenas) stay warm.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from contextvars import copy_context
from functools import partial
from queue import SimpleQueue
from typing import Any, TypeVar

R = TypeVar("R")
log = logging.getLogger(__name__)

_Job = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class WorkerThreads:
    def __init__(
        self, count: int, name: str = "inferpool-worker", initializer: Callable[[], object] | None = None
    ) -> None:
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._initializer = initializer
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    @property
    def count(self) -> int:
        return len(self._threads)

    @property
    def alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

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

        for _ in self._threads:
            self._jobs.put((once, None, None))  # type: ignore[arg-type]
        barrier.wait(timeout)
        if errors:
            raise errors[0]

    def close(self, timeout: float = 5.0) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def _work(self) -> None:
        if self._initializer is not None:
            self._initializer()
        while (job := self._jobs.get()) is not None:
            fn, future, loop = job
            try:
                result = fn()
            except BaseException as exc:
                if future is not None:
                    _complete(loop, future.set_exception, future, exc)
                else:
                    log.exception("background job failed")
            else:
                if future is not None:
                    _complete(loop, future.set_result, future, result)


def _complete(
    loop: asyncio.AbstractEventLoop, setter: Callable[[Any], None], future: asyncio.Future[Any], value: object
) -> None:
    with suppress(RuntimeError):  # the loop closed while we ran: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, setter, future, value)


def _settle(setter: Callable[[Any], None], future: asyncio.Future[Any], value: object) -> None:
    if not future.done():  # the request may have been cancelled (client gone, deadline)
        setter(value)
