"""The uvicorn server with a drain on SIGTERM, as Kubernetes expects of a pod.

uvicorn alone closes its listening socket at once and then waits for open connections, so a
load balancer's next probe meets "connection refused" and a keep-alive client can have a
request cut. Here the first SIGTERM (or SIGINT) only starts a drain: readiness answers 503 at
once, new requests get a clean 503 with Retry-After and ``Connection: close``, everything
already accepted finishes (up to ``drain_seconds``). Then the process stops accepting (the
supervisor answers what is still queued, inferpool.service.processes.backlog_answers), lets keep-alive connections end
after their next answer, and uvicorn's own shutdown runs; the process exits 0. A second
signal skips the drain.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import signal
import socket
import time
from types import FrameType

import uvicorn

from inferpool.service.frontdoor import Activity
from inferpool.service.models.host import ModelHost
from inferpool.service.processes.spread import ConnectionCounts, SpreadAcceptor

log = logging.getLogger(__name__)
POLL_SECONDS = 0.01
LINGER_SECONDS = 1.0
"""How long idle keep-alive connections may stay after the last request: a client whose next
request is already on its way gets a 503 and ``Connection: close`` instead of a reset."""


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, host: ModelHost, requests: Activity, drain_seconds: float,
        counts: ConnectionCounts | None = None, accept_once_serving: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(config)
        self.host = host
        self.requests = requests
        self.drain_seconds = drain_seconds
        self.counts = counts
        """Set when several serving processes share the listening socket: connections are spread
        evenly over them (inferpool.service.processes.spread) instead of going to whichever wakes first."""
        self.accept_once_serving = accept_once_serving
        """Take no connection before the models serve: set where other processes serve meanwhile (a
        model change's new process, a crashed one's replacement). A connection taken while the
        models start and warm would be answered 503 "loading" (1 of 8,151 requests of a swap under
        load in CI) when the process beside it could have served it; left in the listen queue it is."""
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        if not sockets or (self.counts is None and not self.accept_once_serving):
            await super().startup(sockets)
            return
        await super().startup([])  # the lifespan (which starts the models) and uvicorn's state, no accepting yet
        while self.accept_once_serving and self.host.loading and not (self.should_exit or self.host.stopping):
            await asyncio.sleep(POLL_SECONDS)  # the warm requests run on this loop meanwhile
        if self.should_exit or self.host.stopping:
            return  # a stop came first: nothing was taken, the others (or the backlog's answers) have it
        config = self.config
        protocol: type[asyncio.Protocol] = config.http_protocol_class
        arguments = {"config": config, "server_state": self.server_state, "app_state": self.lifespan.state}
        for listener in sockets:
            listener.setblocking(False)
            if self.counts is None:  # uvicorn's own accepting, started later
                made = functools.partial(protocol, **arguments)
                self.servers.append(await self._loop.create_server(made, sock=listener, backlog=config.backlog))
                continue
            acceptor = SpreadAcceptor(listener, protocol, arguments, self.counts, self.host.slot, self.host.board)
            self.servers.append(acceptor)  # type: ignore[arg-type]  # uvicorn only closes and awaits them

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # In a context of its own: the signal may arrive while a request's context (its
        # request id, which every log line carries) is current.
        contextvars.Context().run(self._begin_drain, sig, frame)

    def _begin_drain(self, sig: int, frame: FrameType | None) -> None:
        if self.host.draining or self._loop is None:
            super().handle_exit(sig, frame)  # second signal, or not serving yet: uvicorn's own way
            return
        log.info("%s received: draining for up to %gs", signal.Signals(sig).name, self.drain_seconds)
        self.host.draining = True
        self.requests.closing = True
        # Runs in the signal handler: only hand the work to the loop.
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain()))

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_seconds
        while self.requests.active > 0 and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        for server in self.servers:  # what is still queued is answered by the supervisor
            server.close()
        linger = min(deadline, time.monotonic() + LINGER_SECONDS)
        while (self.requests.active or self.server_state.connections) and time.monotonic() < linger:
            await asyncio.sleep(POLL_SECONDS)
        if self.requests.active:
            log.warning("drain period over with %d requests still running", self.requests.active)
        else:
            log.info("drained: every accepted request was answered")
        # Not through handle_exit: uvicorn would re-raise the signal on exit (exit status 143).
        self.should_exit = True
