"""Keep-alive HTTP/1.1 clients that write one pre-built request (``inferpool.harness.payloads``) and parse
only the status line, ``Content-Length`` (or chunked) and ``Connection: close``: http.client
parses every header through the email package, which costs tens of microseconds a request, and
on a single connection every microsecond the client spends lands in the round trip it measures.

``KeepAlive`` blocks (``inferpool bench``: one request at a time); ``Connection`` is asyncio
(the load generator: many at once); ``status`` is the readiness probe, plain http.client.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
from typing import NamedTuple

from inferpool.harness.payloads import Payload


class Head(NamedTuple):
    """What a response's head says of the body that follows."""

    status: int
    length: int | None  # Content-Length; None without one
    chunked: bool
    close: bool  # Connection: close

    @classmethod
    def parse(cls, head: bytes) -> Head:
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        length = None
        if at >= 0:
            end = lower.find(b"\r\n", at + 2)
            length = int(lower[at + 17 : end if end >= 0 else None])
        return cls(
            int(head[9:12]), length, b"\r\ntransfer-encoding: chunked" in lower, b"\r\nconnection: close" in lower
        )


class KeepAlive:
    """One blocking keep-alive connection to 127.0.0.1; answers must carry a Content-Length."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def encode(self, payload: Payload) -> bytes:
        return payload.encode("127.0.0.1", self.port)

    def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send ``request``; the response's status and body."""
        self.sock.sendall(request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = Head.parse(bytes(self.buffer[:end]))
        if head.length is None:
            raise ConnectionError(f"the server answered without Content-Length: {bytes(self.buffer[:200])!r}")
        start = end + 4
        while len(self.buffer) < start + head.length:
            self._fill()
        body = bytes(self.buffer[start : start + head.length])
        del self.buffer[: start + head.length]
        return head.status, body

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


class Connection:
    """One asyncio keep-alive connection: send a pre-built request, read one response."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def exchange(self, request: bytes) -> int:
        """Send ``request``, return the response's status once its body is read."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None
        assert self.writer is not None
        reader = self.reader
        self.writer.write(request)
        head = Head.parse(await reader.readuntil(b"\r\n\r\n"))
        if head.length is not None:
            if head.length:
                await reader.readexactly(head.length)
        elif head.chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        else:  # no length: the body runs to the end of the connection
            await reader.read()
            self.close()
            return head.status
        if head.close:
            self.close()
        return head.status


def status(port: int, path: str, timeout: float = 2.0) -> int | None:
    """The status of ``GET path`` on 127.0.0.1:``port``, or None if nothing answers yet."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
