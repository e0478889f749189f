"""RuntimePool: a lock-free LIFO of runtimes.

The fast path is one ``deque.pop`` to borrow and one ``deque.append`` to give back; both are
single atomic operations in CPython, so no lock is taken while a runtime is free. LIFO keeps
the most recently used runtime (and its warm caches) busy. Only when every runtime is out
does a borrower sleep on a condition variable, and only then does a returner pay for a
notify.

Each runtime sits in a permanent :class:`Lease` that is its own context manager, so a borrow
allocates nothing: the deque holds leases, and a lease is in the deque at most once, which
is what guarantees that no two threads ever hold the same runtime. A held lease can have its
runtime swapped for a fresh one (:meth:`RuntimePool.replace`, e.g. after the old one failed):
the lease, not the runtime, is the pool's unit, so the pool never shrinks or grows.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import Generic, TypeVar

from inferpool.engine.errors import Overloaded

T = TypeVar("T")


class Lease(Generic[T]):
    """``with pool.borrow() as runtime:`` -- gives the runtime back on exit, even on error."""

    __slots__ = ("_idle", "_pool", "runtime")

    def __init__(self, pool: RuntimePool[T], runtime: T) -> None:
        self._pool = pool
        self._idle = pool._idle
        self.runtime = runtime

    def __enter__(self) -> T:
        return self.runtime

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._idle.append(self)
        # Read without the lock: a borrower counts itself in before its last pop attempt,
        # so either it sees this lease or we see it waiting and wake it.
        if self._pool._waiters:
            self._pool._wake_one()


class RuntimePool(Generic[T]):
    def __init__(self, runtimes: Iterable[T], *, timeout: float = 5.0) -> None:
        self._idle: deque[Lease[T]] = deque()
        self._waiters = 0
        self._freed = threading.Condition(threading.Lock())
        self._swap = threading.Lock()  # replace() only: serialises rebuilding ``runtimes``
        self.timeout = timeout
        self.runtimes = tuple(runtimes)
        if not self.runtimes:
            raise ValueError("a RuntimePool needs at least one runtime")
        self._idle.extend(Lease(self, runtime) for runtime in self.runtimes)

    @property
    def size(self) -> int:
        return len(self.runtimes)

    @property
    def idle(self) -> int:
        return len(self._idle)

    def replace(self, lease: Lease[T], runtime: T) -> T:
        """Put ``runtime`` into ``lease`` in place of the one it holds, and return the old one.

        The caller must hold the lease (borrowed, not yet given back): a held lease is in no
        other thread's hands and not in the idle deque, so setting its ``runtime`` needs no
        lock, and the borrow/give-back fast path stays lock-free. The lock only serialises
        rebuilding the ``runtimes`` tuple (readers see the old or the new tuple, both whole).
        """
        if lease._pool is not self:
            raise ValueError("the lease belongs to another pool")
        with self._swap:
            # A misuse guard, O(size) on this slow path only; the scan is one C call (identity
            # compares), so no other thread can touch the deque during it.
            if lease in self._idle:
                raise ValueError("replace() needs a borrowed lease, not an idle one")
            old = lease.runtime
            lease.runtime = runtime
            self.runtimes = tuple(runtime if r is old else r for r in self.runtimes)
        return old

    def borrow(self) -> Lease[T]:
        """A free runtime's lease; waits up to ``timeout`` s, then raises Overloaded."""
        try:
            return self._idle.pop()
        except IndexError:
            return self._wait()

    def _wake_one(self) -> None:
        with self._freed:
            self._freed.notify()

    def _wait(self) -> Lease[T]:
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
