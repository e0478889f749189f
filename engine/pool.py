"""RuntimePool: a lock-free LIFO of runtimes.

The fast path is one ``deque.pop`` to borrow and one ``deque.append`` to give back; both are
single atomic operations in CPython, so no lock is taken while a runtime is free. LIFO keeps
the most recently used runtime (and its warm caches) busy. Only when every runtime is out
does a borrower sleep on a condition variable, and only then does a returner pay for a
notify.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import Generic, TypeVar

from engine.errors import Overloaded

T = TypeVar("T")


class RuntimePool(Generic[T]):
    def __init__(self, runtimes: Iterable[T], *, timeout: float = 5.0) -> None:
        self._idle: deque[T] = deque(runtimes)
        self.size = len(self._idle)
        if self.size == 0:
            raise ValueError("a RuntimePool needs at least one runtime")
        self.timeout = timeout
        self._waiters = 0
        self._freed = threading.Condition(threading.Lock())

    @property
    def idle(self) -> int:
        return len(self._idle)

    def borrow(self) -> Lease[T]:
        """``with pool.borrow() as runtime:`` -- the runtime always comes back, even on error."""
        return Lease(self)

    def acquire(self) -> T:
        try:
            return self._idle.pop()
        except IndexError:
            return self._wait()

    def release(self, runtime: T) -> None:
        self._idle.append(runtime)
        # Read without the lock: a borrower counts itself in before its last pop attempt,
        # so either it sees this runtime or we see it waiting and wake it.
        if self._waiters:
            with self._freed:
                self._freed.notify()

    def _wait(self) -> T:
        deadline = time.monotonic() + self.timeout
        with self._freed:
            self._waiters += 1
            try:
                while True:
                    try:
                        return self._idle.pop()
                    except IndexError:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            raise Overloaded(
                                f"all {self.size} runtimes stayed busy for {self.timeout:g}s",
                                retry_after=self.timeout,
                            ) from None
                        self._freed.wait(remaining)
            finally:
                self._waiters -= 1


class Lease(Generic[T]):
    """Context manager for one borrow; a class rather than @contextmanager for speed."""

    __slots__ = ("_pool", "_runtime")

    def __init__(self, pool: RuntimePool[T]) -> None:
        self._pool = pool

    def __enter__(self) -> T:
        self._runtime = self._pool.acquire()
        return self._runtime

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pool.release(self._runtime)
