"""DrainingServer's ``accept_once_serving`` (inferpool.service.processes.drain): a serving process
that others serve beside takes no connection while its models start and warm; one without
(the first start) takes them at once. On a real loop and socket, with a stand-in host."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import pytest
import uvicorn

from inferpool.service.frontdoor import Activity
from inferpool.service.processes.drain import DrainingServer
from inferpool.service.processes.spread import ConnectionCounts

REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


async def _app(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _server(host: SimpleNamespace, counts: ConnectionCounts | None, accept_once_serving: bool) -> DrainingServer:
    config = uvicorn.Config(_app, lifespan="off", loop="asyncio", http="h11", log_level="warning")
    config.load()
    server = DrainingServer(config, host, Activity(), 1.0, counts, accept_once_serving)  # type: ignore[arg-type]
    server.lifespan = config.lifespan_class(config)  # as uvicorn's serve() sets it before startup
    return server


def _host() -> SimpleNamespace:
    return SimpleNamespace(loading=True, stopping=False, draining=False, slot=0, board=None)


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


async def _answer(sock: socket.socket, seconds: float) -> bytes | None:
    """The first bytes the server sends within ``seconds`` (None: nothing came)."""
    try:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), seconds)
    except TimeoutError:
        return None


async def _client(address: tuple[str, int]) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address)
    await asyncio.get_running_loop().sock_sendall(sock, REQUEST)
    return sock


async def _answered_then_stopped(client: socket.socket, server: DrainingServer, listener: socket.socket) -> None:
    """``client``'s request gets its 200; then the server and the sockets are closed."""
    answer = await _answer(client, 5)
    assert answer is not None
    assert answer.startswith(b"HTTP/1.1 200")
    client.close()
    server.should_exit = True
    await server.shutdown()
    listener.close()


@pytest.mark.parametrize("spread", [False, True], ids=["uvicorn's accepting", "spread accepting"])
def test_a_process_served_beside_takes_connections_only_once_its_models_serve(spread):
    async def scenario() -> None:
        listener = _listener()
        host = _host()
        server = _server(host, ConnectionCounts(2) if spread else None, accept_once_serving=True)
        starting = asyncio.ensure_future(server.startup(sockets=[listener]))
        client = await _client(listener.getsockname())
        assert await _answer(client, 0.3) is None  # queued, not taken: the models still start
        assert not starting.done()
        host.loading = False
        await asyncio.wait_for(starting, 5)
        await _answered_then_stopped(client, server, listener)

    asyncio.run(scenario())


def test_the_first_start_takes_connections_while_its_models_load():
    async def scenario() -> None:
        listener = _listener()
        server = _server(_host(), ConnectionCounts(2), accept_once_serving=False)
        await asyncio.wait_for(server.startup(sockets=[listener]), 5)
        client = await _client(listener.getsockname())
        await _answered_then_stopped(client, server, listener)  # nobody else serves (a real app says "loading")

    asyncio.run(scenario())


def test_a_stop_while_the_models_start_takes_nothing():
    async def scenario() -> None:
        listener = _listener()
        host = _host()
        server = _server(host, None, accept_once_serving=True)
        starting = asyncio.ensure_future(server.startup(sockets=[listener]))
        await asyncio.sleep(0.05)
        host.stopping = True
        await asyncio.wait_for(starting, 5)
        assert server.servers == []
        listener.close()

    asyncio.run(scenario())
