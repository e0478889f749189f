"""ProcessBoard: what every serving process needs to know about the others, in shared memory.

One byte per serving process (its state) and one for the drain, in an anonymous shared mapping
the supervisor makes before it forks: every process reads the others' states with no pipe, no
lock and no round trip, so ``/health/ready`` can answer for the whole pod from any process.
Single bytes are written and read atomically; a reader may see a change a moment late, which a
readiness probe tolerates.
"""

from __future__ import annotations

import mmap

STARTING, READY, DOWN = 0, 1, 2
_DRAINING = 0  # offset of the drain flag; process slots follow it


class ProcessBoard:
    def __init__(self, processes: int) -> None:
        self.processes = processes
        # MAP_SHARED | MAP_ANONYMOUS: the same pages in the parent and every child forked later.
        self._memory = mmap.mmap(-1, processes + 1)

    def mark(self, slot: int, state: int) -> None:
        self._memory[slot + 1] = state

    def state(self, slot: int) -> int:
        return self._memory[slot + 1]

    def all_ready(self) -> bool:
        return not self.draining and all(self._memory[slot + 1] == READY for slot in range(self.processes))

    @property
    def draining(self) -> bool:
        return self._memory[_DRAINING] == 1

    def start_drain(self) -> None:
        self._memory[_DRAINING] = 1
