"""The HTTP side of ``inferpool bench``: the request bodies a model's example inputs make, a
blocking keep-alive client, and a real ``inferpool serve`` in a subprocess to aim it at.

The client writes one pre-built request and parses only the status line and
``Content-Length``: http.client parses every header through the email package, which costs
tens of microseconds a request, and on a single connection every microsecond the client
spends lands in the round trip that is being measured.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import orjson

from engine import Schema
from engine.schema import Array
from service.v2codec import HEADER_LENGTH, V2_TYPES


def json_request(inputs: object) -> tuple[str, bytes, dict[str, str]]:
    """``POST /predict`` with ``{"inputs": ...}``: numpy arrays go as nested lists."""
    body = orjson.dumps({"inputs": inputs}, option=orjson.OPT_SERIALIZE_NUMPY)
    return "/predict", body, {"content-type": "application/json"}


def v2_binary_request(model: str, schema: Schema, arrays: Mapping[str, Array]) -> tuple[str, bytes, dict[str, str]]:
    """v2 infer with every input and output as binary tensor data (Triton's extension)."""
    tensors = [np.ascontiguousarray(arrays[spec.name]) for spec in schema.inputs]
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": spec.name,
                    "shape": list(tensor.shape),
                    "datatype": V2_TYPES[tensor.dtype.name],
                    "parameters": {"binary_data_size": tensor.nbytes},
                }
                for spec, tensor in zip(schema.inputs, tensors, strict=True)
            ],
            "outputs": [{"name": spec.name, "parameters": {"binary_data": True}} for spec in schema.outputs],
        }
    )
    headers = {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(header))}
    return f"/v2/models/{model}/infer", header + b"".join(t.tobytes() for t in tensors), headers


class KeepAlive:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1 sending pre-built requests."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def build(self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"host: 127.0.0.1:{self.port}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send ``request``; the response's status and body."""
        self.sock.sendall(request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = bytes(self.buffer[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            raise ConnectionError(f"the server answered without Content-Length: {head[:200]!r}")
        line_end = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : line_end if line_end >= 0 else None])
        start = end + 4
        while len(self.buffer) < start + length:
            self._fill()
        body = bytes(self.buffer[start : start + length])
        del self.buffer[: start + length]
        return int(head[9:12]), body

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SERVE = ("-m", "cli.main", "serve")
REFERENCE = ("-m", "service.bench_reference")  # the bare ASGI app the bench compares with


@contextmanager
def serve_subprocess(serve_args: list[str], ready_timeout: float, command: tuple[str, ...] = SERVE) -> Iterator[int]:
    """``inferpool serve`` (or ``command``) with the bench's own settings arguments on a free
    127.0.0.1 port (given last, so they win), until it is ready; yields the port; SIGTERM on exit."""
    port = free_port()
    argv = [sys.executable, *command, *serve_args, "--host", "127.0.0.1", "--port", str(port)]
    log = Path(tempfile.mkstemp(prefix="inferpool-bench-", suffix=".log")[1])
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        _wait_ready(port, process, log, ready_timeout)
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.unlink(missing_ok=True)


def _wait_ready(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the server exited with status {process.returncode}:\n{tail}")
        with contextlib.suppress(OSError):
            client = KeepAlive(port, timeout=2)
            try:
                if client.exchange(client.build("GET", "/health/ready"))[0] == 200:
                    return
            finally:
                client.close()
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-4000:]
    raise TimeoutError(f"the server was not ready within {timeout:g}s (raise --ready-timeout):\n{tail}")
