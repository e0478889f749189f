"""ProcessBoard: what every serving process needs to know about the others, in shared memory.

One byte per serving process (its state) and one for the drain, in an anonymous shared mapping
the supervisor makes before it forks: every process reads the others' states with no pipe, no
lock and no round trip, so ``/health/ready`` can answer for the whole pod from any process.
Single bytes are written and read atomically; a reader may see a change a moment late, which a
readiness probe tolerates. Each slot also holds the generation of the model set its process
serves (the supervisor counts its changes), so that a process can tell whether all the others
serve the same set as itself (readiness per model version).
"""

from __future__ import annotations

import mmap
import struct

STARTING, READY, DOWN = 0, 1, 2
_DRAINING = 0  # offset of the drain flag; process slots follow it, then their generations
_GENERATION = struct.Struct("I")  # aligned 4-byte words: a reader never sees one half-written


class ProcessBoard:
    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._generations = -(-(processes + 1) // _GENERATION.size) * _GENERATION.size
        # MAP_SHARED | MAP_ANONYMOUS: the same pages in the parent and every child forked later.
        self._memory = mmap.mmap(-1, self._generations + processes * _GENERATION.size)

    def mark(self, slot: int, state: int, generation: int | None = None) -> None:
        """``slot``'s state; with ``generation``, the model set its process serves (written first:
        a reader that sees READY sees the generation it is ready with)."""
        if generation is not None:
            _GENERATION.pack_into(self._memory, self._generations + slot * _GENERATION.size, generation)
        self._memory[slot + 1] = state

    def state(self, slot: int) -> int:
        return self._memory[slot + 1]

    def all_ready(self) -> bool:
        return not self.draining and all(self._memory[slot + 1] == READY for slot in range(self.processes))

    def any_ready(self) -> bool:
        return any(self._memory[slot + 1] == READY for slot in range(self.processes))

    def settled(self, generation: int) -> bool:
        """Every process is ready and serves the model set of ``generation``."""
        first = self._generations
        size = _GENERATION.size
        return self.all_ready() and all(
            _GENERATION.unpack_from(self._memory, first + slot * size)[0] == generation
            for slot in range(self.processes)
        )

    @property
    def draining(self) -> bool:
        return self._memory[_DRAINING] == 1

    def start_drain(self) -> None:
        self._memory[_DRAINING] = 1
