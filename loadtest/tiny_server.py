"""A trivial HTTP/1.1 keep-alive server: measures the load generator itself, and tests it.

    python -m loadtest.tiny_server --port 8099 [--sleep-ms 0]

Answers every request (any method, any path) with ``200 {}`` after ``--sleep-ms`` (the delay
is a timer, not a blocked loop, so requests on different connections overlap). Parses just
enough HTTP: headers up to the blank line and a ``Content-Length`` body. 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class _Protocol(asyncio.Protocol):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.buffer = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # uvloop's transports do not subclass asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17 : stop if stop >= 0 else len(head)])
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            if self.delay > 0:
                asyncio.get_running_loop().call_later(self.delay, self._answer)
            else:
                self._answer()

    def _answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(RESPONSE)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(port: int, sleep_ms: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Protocol(sleep_ms / 1e3), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    args = parser.parse_args()
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner, contextlib.suppress(KeyboardInterrupt):
        runner.run(serve(args.port, args.sleep_ms))


if __name__ == "__main__":
    main()
