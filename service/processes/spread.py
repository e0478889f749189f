"""Spreading connections over the serving processes: each accepts only while it holds no more
than the others.

Every serving process accepts from the one listening socket the supervisor bound. Left to the
event loop, the first process to wake takes every connection queued at that moment (uvloop, like
asyncio, accepts until the queue is empty), so 2-4 clients that connect at once -- a proxy's pool,
a client pool, wrk -- all landed on one process in half the runs here, with the other idle
(ResNet-50 at 4 keep-alive connections: 4+0 answered 11.6 img/s, 2+2 23.3). Here a process
accepts only while it holds no more open connections than every other ready process (the counts
live in shared memory made before the fork, as the ProcessBoard's states do), and then takes, in
that wake-up, up to its even share of every connection held or queued (``fair_take``, the queue's
length read from the listening socket); otherwise it leaves the queue to the others, looks again
every ``POLL_SECONDS``, and after ``DEFER_SECONDS`` takes its share itself, so a busy or stuck
peer can delay a connection by that much at most.

Accepting evenly cannot see the future: a connection that closes right after the others arrive (a
client's probe, a health check) leaves its process with fewer. So a process holding more than one
connection over another's sheds one: its next answer says ``Connection: close`` (as a retiring
process's do, inferpool.service.processes.retiring_server), the client reconnects, and the accept rule places the new
connection on the process with fewer. One shed at a time, and only on HTTP/1.1 keep-alive
connections, whose clients reconnect by the protocol's rules.

Counts are whole aligned words, each written by one process only and read without a lock: a
reader may see a count a moment late, which costs one connection placed a little unevenly.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import select
import socket
import struct
import time
from typing import Any

from inferpool.service.processes.process_states import READY, ProcessBoard

log = logging.getLogger(__name__)
_SLOT = struct.Struct("q")
_UNACKED = struct.Struct("I")
_UNACKED_AT = 24  # struct tcp_info: eight one-byte fields, then rto, ato, snd_mss, rcv_mss, unacked
_TCP_INFO_SIZE = 104
DEFER_SECONDS = 0.05
"""How long a process with more connections than another leaves a queued one to the others."""
POLL_SECONDS = 0.001
"""How often a deferring process looks again (the others may have caught up meanwhile)."""
CLOSED = 1 << 40
"""The count of a process that accepts no more (retiring, draining): the others never defer to it."""
PAUSE_SECONDS = 0.1
"""After accept() fails for want of file descriptors: the queue stays put, retried this much later."""
LOOK_SECONDS = 0.01
"""How often a request's head reads the other processes' counts to decide on shedding: the read
was ~4 % of a digits request's samples when made on every one (py-spy, wrk at 8 connections); a
change of this process's own count makes the next head look at once."""


class ConnectionCounts:
    """Open connections per serving process slot, in memory shared by every process forked later."""

    def __init__(self, processes: int) -> None:
        self.processes = max(1, processes)
        self._memory = mmap.mmap(-1, self.processes * _SLOT.size)

    def set(self, slot: int, count: int) -> None:
        _SLOT.pack_into(self._memory, slot * _SLOT.size, count)

    def get(self, slot: int) -> int:
        return int(_SLOT.unpack_from(self._memory, slot * _SLOT.size)[0])

    def elsewhere(self, slot: int, board: ProcessBoard | None) -> list[int]:
        """The connections each other ready process that still accepts holds."""
        others = [
            self.get(other)
            for other in range(self.processes)
            if other != slot and (board is None or board.state(other) == READY)
        ]
        return [count for count in others if count < CLOSED]

    def fewest_elsewhere(self, slot: int, board: ProcessBoard | None) -> int | None:
        """The fewest connections another ready process holds (None: no other takes any)."""
        counts = self.elsewhere(slot, board)
        return min(counts) if counts else None


def queued_connections(listener: socket.socket) -> int | None:
    """Connections waiting in ``listener``'s accept queue (Linux: a listening socket's TCP_INFO
    gives its backlog as ``tcpi_unacked``); None where that cannot be read."""
    try:
        info = listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except (AttributeError, OSError):
        return None
    return int(_UNACKED.unpack_from(info, _UNACKED_AT)[0]) if len(info) >= _UNACKED_AT + _UNACKED.size else None


def fair_take(open_here: int, elsewhere: list[int], queued: int | None) -> int:
    """How many queued connections one wake-up takes: up to this process's even share of every
    connection held or queued, at least one. One per wake-up was too few where a request runs on
    the event loop (inline dispatch): a wake-up comes once per loop iteration, an iteration runs
    one request per connection held, so a burst of 32 connections (a client pool, wrk) was taken
    one per ~3.5 ms x connections held; in one run the last waited ~1 s for its first answer
    (MiniLM, docs/BENCHMARKS.md, thirteenth session)."""
    if queued is None or queued <= 1:
        return 1
    share = -(-(open_here + sum(elsewhere) + queued) // (len(elsewhere) + 1))
    return max(1, min(queued, share - open_here))


class SpreadAcceptor:
    """Accepts from ``listener`` on the running loop, only while this process holds no more than
    any other and up to its even share per wake-up, serving each with ``protocol(**arguments)``;
    sheds one when it holds two more than another. ``close()`` stops it (what uvicorn's shutdown
    and the drain call on each of its servers)."""

    def __init__(
        self, listener: socket.socket, protocol: type[asyncio.Protocol], arguments: dict[str, Any],
        counts: ConnectionCounts, slot: int, board: ProcessBoard | None,
    ) -> None:  # fmt: skip
        self.listener = listener
        self.counts, self.slot, self.board = counts, slot, board
        self.open = 0
        self.accepted = self.deferred = self.shed = 0
        """Connections taken, wake-ups left to the other processes, connections shed (tests, logs)."""
        self._shedding: asyncio.Protocol | None = None
        self._gone: set[asyncio.Protocol] = set()
        """Connections counted out at their client's EOF, whose connection_lost is still to come."""
        self._next_look = 0.0
        self._protocol = self._counted(protocol)
        self._arguments = arguments
        self._loop = asyncio.get_running_loop()
        self._deferring_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = asyncio.Event()
        self._publish()
        self._watch()

    def _watch(self) -> None:
        self._loop.add_reader(self.listener.fileno(), self._readable)

    def _readable(self) -> None:
        elsewhere = self.counts.elsewhere(self.slot, self.board)
        if elsewhere and self.open > min(elsewhere):
            now = self._loop.time()
            if self._deferring_since is None:
                self._deferring_since = now
                self.deferred += 1
            if now - self._deferring_since < DEFER_SECONDS:
                self._pause(POLL_SECONDS)
                return
        self._deferring_since = None
        for _ in range(fair_take(self.open, elsewhere, queued_connections(self.listener))):
            if not self._take():
                return

    def _take(self) -> bool:
        """One connection from the queue; False when there was none to take (or accept failed)."""
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return False  # another process took it
        except OSError as exc:  # EMFILE and the like: the connection waits in the queue
            log.warning("accept failed (%s): retrying in %gs", exc, PAUSE_SECONDS)
            self._pause(PAUSE_SECONDS)
            return False
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.accepted += 1
        self.open += 1
        self._next_look = 0.0
        self._publish()
        self._loop.create_task(self._connect(sock))
        return True

    def _counted(self, base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        """``base`` telling this acceptor when its connection ends, and (httptools' protocol) when a
        request's head is in: the moment to decide whether its answer closes the connection. A
        subclass, not a patched instance: the HTTP parser binds its callbacks at construction."""
        acceptor = self

        class Counted(base):  # type: ignore[valid-type, misc]
            def eof_received(self) -> bool | None:
                kept: bool | None = super().eof_received()
                if not kept:  # the client has gone and the transport closes now
                    acceptor._left(self)
                return kept

            def connection_lost(self, exc: Exception | None) -> None:
                acceptor._lost(self)
                super().connection_lost(exc)

            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                acceptor._consider_shedding(self)

        if not hasattr(base, "on_headers_complete"):
            del Counted.on_headers_complete
        return Counted

    async def _connect(self, sock: socket.socket) -> None:
        made = False

        def protocol() -> asyncio.Protocol:
            nonlocal made
            made = True
            return self._protocol(**self._arguments)

        try:
            await self._loop.connect_accepted_socket(protocol, sock)
        except Exception:
            log.exception("could not serve an accepted connection")
            if not made:  # connection_lost will never come
                self._lost(None)
            sock.close()

    def _consider_shedding(self, protocol: asyncio.Protocol) -> None:
        # Shedding needs two connections more than another process holds (at least 0): with one
        # or none open the shared counts need not be read at all, on every request's head.
        if self.open < 2 or self._shedding is not None or self._closed.is_set():
            return
        cycle = getattr(protocol, "cycle", None)
        if cycle is None or not cycle.keep_alive:
            return
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + LOOK_SECONDS
        fewest = self.counts.fewest_elsewhere(self.slot, self.board)
        if fewest is not None and self.open > fewest + 1:
            if queued_connections(self.listener):
                # A burst is still being taken (each process its share, fair_take): the gap closes
                # once the others take what waits, and shedding now would only churn a connection.
                self._next_look = 0.0
                return
            cycle.keep_alive = False  # the answer says Connection: close, and the connection ends after it
            self._shedding = protocol
            self.shed += 1

    def _left(self, protocol: asyncio.Protocol) -> None:
        # Counted out at the client's EOF, not a loop iteration later at connection_lost: the
        # socket is closed by then, and a burst of clients queued in between would be split by
        # the stale count (a peer holding "one more" defers, and this one takes the whole burst).
        self._gone.add(protocol)
        self._count_out(protocol)

    def _lost(self, protocol: asyncio.Protocol | None) -> None:
        if protocol is not None and protocol in self._gone:
            self._gone.discard(protocol)
            return
        self._count_out(protocol)

    def _count_out(self, protocol: asyncio.Protocol | None) -> None:
        if protocol is not None and protocol is self._shedding:
            self._shedding = None
        self.open -= 1
        self._next_look = 0.0
        self._publish()

    def _publish(self) -> None:
        # Once closed, the slot is written no more: a retiring process's replacement serves in the
        # same slot, and its counts are the ones the others must see.
        if not self._closed.is_set():
            self.counts.set(self.slot, self.open)

    def _pause(self, seconds: float) -> None:
        self._loop.remove_reader(self.listener.fileno())
        self._timer = self._loop.call_later(seconds, self._resume)

    def _resume(self) -> None:
        self._timer = None
        if self._closed.is_set():
            return
        if not select.select([self.listener], [], [], 0)[0]:
            self._deferring_since = None  # another process took what waited: a new one waits anew
        self._watch()

    def close(self) -> None:
        if self._closed.is_set():
            return
        if self.counts.get(self.slot) == self.open:  # not yet overwritten by a replacement in this slot
            self.counts.set(self.slot, CLOSED)
        self._closed.set()
        if self._timer is not None:
            self._timer.cancel()
        self._loop.remove_reader(self.listener.fileno())

    async def wait_closed(self) -> None:
        await self._closed.wait()
