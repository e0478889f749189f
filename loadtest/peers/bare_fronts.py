"""The bare handler's ``POST /predict`` (loadtest/peers/bare_handler.py) behind other front ends,
for ``python -m loadtest.bench fronts``: how much CPU the HTTP front end itself costs.

    INFERPOOL_BARE_ONNX=FILE python -m loadtest.peers.bare_fronts --port 8001   # plain protocol
    granian --interface rsgi loadtest.peers.bare_fronts:rsgi_app ...            # RSGI (granian)
    granian --interface asgi loadtest.peers.bare_handler:app ...                # ASGI (granian)

``rsgi_app``: the same model call and JSON as the ASGI function, as an RSGI app. ``main``: a plain
asyncio protocol on httptools and uvloop, answering from the parser's ``on_message_complete`` in
two forked processes on one listening socket: no ASGI and no uvicorn, what InferPool's lane does
(service/http/lane.py) with nothing of InferPool's own around it. Neither checks anything, as the
bare handler checks nothing: keep-alive HTTP/1.1 POSTs of a whole body, and any GET answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import Callable
from typing import Any, cast

import httptools
import orjson
import uvloop

from loadtest.peers.bare_handler import ONNX_ENV, READY, predictor

PROCESSES = 2


def _answer(predict: Callable[[object], dict[str, Any]], body: bytes) -> bytes:
    outputs = predict(orjson.loads(body)["inputs"])
    return orjson.dumps({"model": "digits", "outputs": outputs}, option=orjson.OPT_SERIALIZE_NUMPY)


def __getattr__(name: str) -> Any:
    # ``rsgi_app`` for granian's import string, built in each worker on first lookup.
    if name == "rsgi_app":
        predict = predictor(os.environ[ONNX_ENV])
        headers = [("content-type", "application/json")]

        async def rsgi_app(scope: Any, protocol: Any) -> None:
            body = _answer(predict, await protocol()) if scope.method == "POST" else READY
            protocol.response_bytes(200, headers, body)

        globals()["rsgi_app"] = rsgi_app
        return rsgi_app
    raise AttributeError(name)


def connection(predict: Callable[[object], dict[str, Any]]) -> type[asyncio.Protocol]:
    class Connection(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
            self.parser = httptools.HttpRequestParser(self)
            self.body = b""

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_begin(self) -> None:
            self.body = b""

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            body = _answer(predict, self.body) if self.parser.get_method() == b"POST" else READY
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
            self.transport.write(head + body)

    return Connection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(1024)
    for _ in range(PROCESSES):
        if os.fork() == 0:
            uvloop.run(serve(listener, connection(predictor(os.environ[ONNX_ENV]))))
    os.wait()  # the launcher stops the whole process group


async def serve(listener: socket.socket, protocol: type[asyncio.Protocol]) -> None:
    await asyncio.get_running_loop().create_server(protocol, sock=listener)
    await asyncio.Event().wait()


if __name__ == "__main__":
    main()
