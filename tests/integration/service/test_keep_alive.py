"""The keep-alive timeout (service/http/protocol.py): one timer per connection instead of uvicorn's
one per answer, with the same effect: a connection idle for ``timeout_keep_alive`` after its last
answer is closed, one that sent its next request in time is not, and the lane's answers (no
ASGI) and the ASGI path's arm it alike."""

from __future__ import annotations

import asyncio

import pytest
import uvicorn
from fastapi.testclient import TestClient
from uvicorn.server import ServerState

from inferpool.harness.transport import MemoryTransport
from inferpool.service.http.fastpath import InferPoolApp
from inferpool.service.http.protocol import guarded_protocol
from tests.integration.service.test_lane import SAMPLE, post

TIMEOUT = 0.2
GET = b"GET /health/live HTTP/1.1\r\nhost: test\r\n\r\n"


async def connection(app: InferPoolApp) -> tuple[asyncio.Protocol, MemoryTransport]:
    config = uvicorn.Config(app, lifespan="off", log_config=None, timeout_keep_alive=TIMEOUT)  # type: ignore[arg-type]
    config.load()
    state = ServerState()
    state.default_headers = [(b"server", b"uvicorn")]
    protocol = guarded_protocol(10.0, 100)(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
    transport = MemoryTransport()
    transport.protocol = protocol
    protocol.connection_made(transport)
    return protocol, transport


async def answered(protocol: asyncio.Protocol, transport: MemoryTransport, request: bytes) -> None:
    """Sends ``request`` and waits (up to 5 s) for its answer."""
    before = transport.written.count(b"HTTP/1.1 ")
    protocol.data_received(request)
    for _ in range(2500):
        if transport.written.count(b"HTTP/1.1 ") > before:
            return
        await asyncio.sleep(0.002)
    raise AssertionError("no answer within 5 s")


@pytest.mark.parametrize("request_bytes", [post("/predict", SAMPLE), GET], ids=["lane", "asgi"])
def test_an_idle_connection_closes_after_the_timeout_from_its_last_answer(client: TestClient, request_bytes: bytes):
    app: InferPoolApp = client.app  # type: ignore[assignment]

    async def run() -> None:
        protocol, transport = await connection(app)
        for _ in range(3):  # each answer starts the idle time again
            await answered(protocol, transport, request_bytes)
            await asyncio.sleep(TIMEOUT * 0.6)
            assert not transport.closed
        await asyncio.sleep(TIMEOUT * 0.6)  # now idle past the timeout
        assert transport.closed
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_connection_busy_past_the_timeout_is_not_closed_under_its_request(client: TestClient):
    app: InferPoolApp = client.app  # type: ignore[assignment]

    async def run() -> None:
        protocol, transport = await connection(app)
        await answered(protocol, transport, GET)
        head, body = post("/predict", SAMPLE).split(b"\r\n\r\n", 1)
        protocol.data_received(head + b"\r\n\r\n")  # its body comes late: the timer's first expiry sees it busy
        await asyncio.sleep(TIMEOUT * 1.5)
        assert not transport.closed
        await answered(protocol, transport, body)
        await asyncio.sleep(TIMEOUT * 0.5)
        assert not transport.closed
        await asyncio.sleep(TIMEOUT * 1.0)
        assert transport.closed
        await asyncio.sleep(0)

    asyncio.run(run())
