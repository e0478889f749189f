"""Request priorities inside the engine: levels 1 (the highest) to ``levels``, 0 for a caller
that names none (the front door resolves the configured default before it asks the engine).

- Admission (inferpool.engine.serving.admission) gives each level its own room: the highest may
  fill the model's whole capacity, each lower one a ``1/levels`` share less, so that as the queue
  fills the lowest level is refused first and the highest last (``room``).
- The queue the worker threads take from hands out the highest level first, each level first
  come, first served (``LeveledQueue``); the batcher forms batches per level and runs the highest
  level's due batch first (inferpool.engine.executors.batching).

With one level (the default) none of it runs: the executors keep their plain ``SimpleQueue``.
"""

from __future__ import annotations

from collections import deque
from queue import SimpleQueue
from typing import Generic, Protocol, TypeVar


class Leveled(Protocol):
    level: int


T = TypeVar("T", bound=Leveled)


def room(capacity: int, level: int, levels: int) -> int:
    """Requests admitted (running + queued) before one of ``level`` is refused: the whole
    ``capacity`` for level 1 (and 0), ``capacity / levels`` less for each level below it, never
    under one."""
    if level <= 1:
        return capacity
    return max(1, capacity - (min(level, levels) - 1) * capacity // levels)


class LeveledQueue(Generic[T]):
    """``SimpleQueue``'s ``put`` and ``get`` for items with a ``level``: ``get`` returns the
    oldest item of the highest level queued. ``None`` (an executor's stop sign) queues behind
    every level. One token in a ``SimpleQueue`` per item: a ``get`` waits on it in C as before,
    then takes the first item of the first non-empty line (items are appended before their
    token, so a taker holding one always finds one)."""

    def __init__(self, levels: int) -> None:
        self._lines: list[deque[T | None]] = [deque() for _ in range(levels)]
        self._tokens: SimpleQueue[None] = SimpleQueue()

    def put(self, item: T | None) -> None:
        lines = self._lines
        line = len(lines) - 1 if item is None else min(max(item.level, 1), len(lines)) - 1
        lines[line].append(item)
        self._tokens.put(None)

    def get(self, block: bool = True, timeout: float | None = None) -> T | None:
        """As ``SimpleQueue.get``: raises ``queue.Empty`` when nothing came in time."""
        self._tokens.get(block, timeout)
        while True:  # another taker may empty a line between the check and the pop: look again
            for line in self._lines:
                if line:
                    try:
                        return line.popleft()
                    except IndexError:
                        continue

    def qsize(self) -> int:
        return sum(map(len, self._lines))
