"""A serving process that can be retired: replaced by a newer one without refusing anything.

The drain on SIGTERM (inferpool.service.processes.drain) answers new requests 503, which is right when the pod
goes away but wrong when only its model set changes: here the process keeps serving every
request that reaches it, and only stops taking new connections (the processes that replace
it, forked from the updated supervisor, take them from the shared listening socket). Every
answer says ``Connection: close``, so each keep-alive client moves to a new connection after
its next answer; once nothing is in flight and the connections are gone (or ``drain_seconds``
pass) the process exits, and with it its copy of whatever the old models wrote.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import time

import uvicorn

from inferpool.service.frontdoor import Activity
from inferpool.service.models.host import ModelHost
from inferpool.service.processes.drain import POLL_SECONDS, DrainingServer
from inferpool.service.processes.spread import ConnectionCounts
from inferpool.service.processes.supervisor_channel import Control

log = logging.getLogger(__name__)


class RetiringServer(DrainingServer):
    def __init__(
        self, config: uvicorn.Config, host: ModelHost, requests: Activity, drain_seconds: float, control: Control,
        counts: ConnectionCounts | None = None, accept_once_serving: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(config, host, requests, drain_seconds, counts, accept_once_serving)
        self.control = control
        self.retiring = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.control.retire_hooks.insert(0, self.retire)
        self.control.start()

    def retire(self) -> None:
        """Stop accepting at once (called on the loop, before the answer to this process's own
        call is delivered: that answer then says ``Connection: close`` too)."""
        if self.retiring:
            return
        self.retiring = True
        self.requests.closing = True
        for server in self.servers:
            server.close()
        log.info("replaced by a newer serving process: finishing what is in flight")
        contextvars.Context().run(lambda: asyncio.ensure_future(self._retire()))

    async def _retire(self) -> None:
        deadline = time.monotonic() + self.drain_seconds
        while (self.requests.active or self.server_state.connections) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        if self.requests.active:
            log.warning("retired with %d requests still running", self.requests.active)
        self.should_exit = True
