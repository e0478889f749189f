"""PodLoad: how many model calls are running right now in every serving process of one server.

A compute-bound call alone on the machine should use every core, and the same call beside others
only its own. The count that tells the two apart is pod-wide: one serving process cannot see
that the others are idle. The supervisor's host makes one before it forks; each process writes
only its own slot (8-byte aligned words: x86-64 and arm64 read and write them whole), and any
process sums the slots with no lock and no round trip. A reader may see a change a moment
late: the cost is one call run a little wider or narrower than ideal, never a wrong answer.

"Alone" also needs the pod to have been calm for a moment (``calm``): no two calls at once, in any
process, within the last few milliseconds. Under load a process is between two calls for a
millisecond or so (the next request's parsing, the last one's answer), and a call that started
wide in that gap shares the cores with the other's next call (three threads on two cores: MiniLM at
8 connections lost 6 % to it). So each slot also holds when its process last saw a call run
beside another, at its start or its end (CLOCK_MONOTONIC, which every process reads alike).
Overlap, not recent activity, is the sign of load: one client whose requests land on alternate
processes (a new connection each) never overlaps, and keeps the lane.

Counting costs about a microsecond per call, so it runs only once some model of the pod lends
idle cores (``active``): a pod of 20 µs digits calls pays nothing.
"""

from __future__ import annotations

import mmap
import struct
import threading
import time

_SLOT = struct.Struct("q")


class PodLoad:
    def __init__(self, processes: int = 1) -> None:
        self.processes = max(1, processes)
        # MAP_SHARED | MAP_ANONYMOUS: the same pages in the parent and every child forked later.
        # Words 0..n-1: calls running in each process; n..2n-1: when it last saw two at once (ns).
        self._memory = mmap.mmap(-1, 2 * self.processes * _SLOT.size)
        self._slot = 0
        self._mine = 0
        self._lock = threading.Lock()  # this process's threads share its slot
        self.active = False
        """Some model of the pod lends idle cores, so every call is counted."""

    def claim(self, slot: int) -> None:
        """This process counts in ``slot`` (a replacement process takes over its predecessor's
        slot, whose last count a killed process may have left behind)."""
        self._slot = slot % self.processes
        self._mine = 0
        _SLOT.pack_into(self._memory, self._slot * _SLOT.size, 0)
        _SLOT.pack_into(self._memory, (self.processes + self._slot) * _SLOT.size, 0)

    def enter(self) -> int:
        """One more call runs in this process; returns the calls running pod-wide, this one included."""
        with self._lock:
            self._mine += 1
            _SLOT.pack_into(self._memory, self._slot * _SLOT.size, self._mine)
        running = self.running()
        if running > 1:
            _SLOT.pack_into(self._memory, (self.processes + self._slot) * _SLOT.size, time.monotonic_ns())
        return running

    def leave(self) -> None:
        with self._lock:
            self._mine -= 1
            _SLOT.pack_into(self._memory, self._slot * _SLOT.size, self._mine)
        if self.running() > 0:
            # Ended beside another: two processes whose batches run in step see their calls
            # overlap at every end, while the start that overlapped may be a whole call ago, older
            # than the quiet window (ResNet-50 at 4 connections: a call in 8 ran wide beside the
            # other process's, three threads on two cores).
            _SLOT.pack_into(self._memory, (self.processes + self._slot) * _SLOT.size, time.monotonic_ns())

    def running(self) -> int:
        return sum(value for (value,) in _SLOT.iter_unpack(self._memory[: self.processes * _SLOT.size]))

    def calm(self, seconds: float) -> bool:
        """No call of the pod started beside another in the last ``seconds``."""
        since = time.monotonic_ns() - int(seconds * 1e9)
        return all(at <= since for (at,) in _SLOT.iter_unpack(self._memory[self.processes * _SLOT.size :]))
