"""An answer's head and body leave in one write (service/http/protocol.py, OneWriteTransport)."""

from __future__ import annotations

import asyncio
import socket
from typing import ClassVar

from inferpool.service.http.protocol import JOIN_BYTES, ONE_WRITE, OneWriteTransport, guarded_protocol


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def writelines(self, chunks: tuple[bytes, ...]) -> None:
        self.writes.append(b"".join(chunks))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_a_held_head_and_the_body_after_it_are_one_write() -> None:
    real = _Transport()
    one = OneWriteTransport(real)  # type: ignore[arg-type]
    one.hold()
    one.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert real.writes == []  # held for the body
    one.write(b"{}")
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    one.flush()
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]  # nothing left to flush
    one.write(b"next")  # not held: the next answer asks again
    assert real.writes[-1] == b"next"


def test_without_hold_every_write_goes_straight_through() -> None:
    real = _Transport()
    one = OneWriteTransport(real)  # type: ignore[arg-type]
    one.write(b"head")
    assert real.writes == [b"head"]  # a streamed answer's head is not held back
    one.write(b"chunk")
    assert real.writes == [b"head", b"chunk"]


def test_a_large_body_flush_and_close_keep_the_order_of_the_bytes() -> None:
    real = _Transport()
    one = OneWriteTransport(real)  # type: ignore[arg-type]
    body = b"x" * (JOIN_BYTES + 1)
    one.hold()
    one.write(b"head")
    one.write(body)
    assert real.writes == [b"head" + body]
    one.hold()
    one.write(b"alone")
    one.flush()  # the body never came (the route failed between): the head still leaves
    assert real.writes[-1] == b"alone"
    one.hold()
    one.write(b"last")
    one.close()  # what is held leaves before the connection closes
    assert real.writes[-1] == b"last"
    assert real.closed
    assert one.is_closing()
    assert one.get_extra_info("peername") == "info:peername"


class _Counting:
    """The connection's transport, counting writes (uvicorn and the protocol see no difference)."""

    writes: ClassVar[list[bytes]] = []

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        _Counting.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


def test_a_served_answer_is_one_write_of_the_connection() -> None:
    """Through the real protocol (uvicorn writes head and body apart without it)."""

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        assert callable(send)
        assert isinstance(scope, dict)
        one_write = scope[ONE_WRITE]
        assert isinstance(one_write, OneWriteTransport)
        one_write.hold()  # as the hot routes do (service/http/rawasgi.py send_answer)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"hello"})

    async def scenario() -> None:
        from uvicorn.config import Config
        from uvicorn.server import ServerState

        config = Config(app, http="httptools", lifespan="off", log_level="warning")
        config.load()
        state = ServerState()
        guarded = guarded_protocol(5.0, 10)

        class protocol(guarded):  # type: ignore[valid-type, misc]
            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(_Counting(transport))

        _Counting.writes = []
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        client.setblocking(False)
        data = b""
        for _ in range(200):
            await asyncio.sleep(0.005)
            try:
                data = client.recv(65536)
                break
            except BlockingIOError:
                continue
        client.close()
        server.close()
        assert data.startswith(b"HTTP/1.1 200 OK")
        assert data.endswith(b"\r\n\r\nhello")
        assert len(_Counting.writes) == 1
        assert _Counting.writes[0] == data

    asyncio.run(scenario())
