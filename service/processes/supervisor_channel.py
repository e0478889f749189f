"""The channel between a serving process and the supervisor, made before the fork.

One ``SOCK_SEQPACKET`` socket pair per serving process: each message is one JSON object and
arrives whole, in order, with no framing of ours. The process says ``ready`` once its models
have started and its gRPC front end (if any) listens (``announce_after``), and asks the
repository calls (``index``, ``load``, ``unload``), which the supervisor answers with
``{"status": ..., "body": ...}``. The supervisor tells a process it
is replaced with ``retire``: sent before the answer to a call that process asked, so that the
call's own answer already closes its connection (service/processes/retiring_server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

import orjson

from inferpool.service.apierror import ApiError

log = logging.getLogger(__name__)
MAX_MESSAGE = 4 << 20  # an index of a large repository fits; a load's config override is small
Message = dict[str, Any]


def pair() -> tuple[socket.socket, socket.socket]:
    """(the supervisor's end, the serving process's end)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send(sock: socket.socket, message: Message) -> None:
    with contextlib.suppress(OSError):  # the other end is gone: it is reaped, or it stops
        sock.send(orjson.dumps(message))


def receive(sock: socket.socket) -> Message | None:
    """One message, or None when the other end has closed."""
    try:
        data = sock.recv(MAX_MESSAGE)
    except OSError:
        return None
    return orjson.loads(data) if data else None


def announce_after(announce: Callable[[], None], parts: int) -> Callable[[], None]:
    """``announce`` once the returned callable has been called ``parts`` times, from any threads:
    a process is ready only once its models have started (the loader thread) and its gRPC front
    end listens (the loop); said before that, a model change retires the old process while the
    new one takes no gRPC connection yet, and a client reconnecting then meets a closing one."""
    left = [parts]
    lock = threading.Lock()

    def arrive() -> None:
        with lock:
            left[0] -= 1
            done = left[0] == 0
        if done:
            announce()

    return arrive


class Control:
    """The serving process's end: asks the supervisor, one call at a time."""

    def __init__(self, sock: socket.socket, mode: str) -> None:
        self.sock = sock
        self.mode = mode
        """The repository's model_control_mode: 'none' refuses load and unload."""
        self._waiting: asyncio.Future[Message] | None = None
        self._lock: asyncio.Lock | None = None
        self._reader: asyncio.Task[None] | None = None
        self.retire_hooks: list[Callable[[], None]] = []
        """Called, in order, when the supervisor says this process is replaced: the HTTP server
        stops accepting and the gRPC front end stops taking calls, both before the answer to a
        call this process asked is delivered."""

    def announce(self) -> None:
        """Every model has started (called on the host's loader thread)."""
        send(self.sock, {"op": "ready"})

    def start(self) -> None:
        """Read the supervisor's messages on the running loop from now on."""
        self.sock.setblocking(False)
        self._lock = asyncio.Lock()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def ask(self, request: Message) -> Message:
        """The supervisor's answer to ``request`` (a load waits until every process serves it)."""
        assert self._lock is not None, "start() first"
        async with self._lock:
            self._waiting = asyncio.get_running_loop().create_future()
            await asyncio.get_running_loop().sock_sendall(self.sock, orjson.dumps(request))
            return await self._waiting

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await loop.sock_recv(self.sock, MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:  # the supervisor is gone (PDEATHSIG drains this process) or closed us
                if self._waiting is not None and not self._waiting.done():
                    self._waiting.set_result({"status": 503, "body": {"error": "the supervisor is gone"}})
                return
            message = orjson.loads(data)
            if message.get("op") == "retire":
                for retire in self.retire_hooks:
                    retire()
            elif self._waiting is not None and not self._waiting.done():
                self._waiting.set_result(message)
            else:
                log.warning("unexpected message from the supervisor: %r", message)


def control_for(found: Control | None, changes: bool) -> Control:
    """The channel for a repository call (``changes``: a load or unload), or the error REST and
    gRPC both answer (service/grpc/repository.py)."""
    if found is None:
        message = "this server has no model repository; start it with --model-repository DIR"
        raise ApiError(404, message, "no_repository")
    if changes and found.mode != "explicit":
        raise ApiError(
            403,
            f"model control is off (model_control_mode={found.mode!r}): start the server with "
            "--model-control-mode explicit to load and unload models by API",
            "control_off",
        )
    return found
