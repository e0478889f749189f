"""An in-memory connection for driving the server's own HTTP protocol class without sockets: the
lane's tests (tests/integration/service) and ``python -m loadtest.bench lane_cpu``."""

from __future__ import annotations

import asyncio
from typing import Any


class MemoryTransport(asyncio.Transport):
    """What a connection's protocol writes, kept (``keep=False``: only counted); closing it tells
    the protocol the connection is gone."""

    def __init__(self, keep: bool = True) -> None:
        super().__init__()
        self.keep = keep
        self.written = bytearray()
        self.writes = 0
        self.closed = False
        self.protocol: asyncio.Protocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        if self.keep:
            self.written += data

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.protocol is not None:
                asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
