"""A server in a subprocess on a free 127.0.0.1 port: ``inferpool serve``, the bench's reference
app or a peer, for ``inferpool bench``, the load tests and the tests.

``launch`` is the one launcher: the server runs in its own session (process group) with its
output in a log file (a temporary one unless a directory is given), optionally pinned to CPUs;
it yields once a path answers (200 by default) and stops the server on the way out, whatever
interrupts the block: SIGTERM, SIGKILL if it is still there after ``stop_timeout``, then the
same for anything its group left behind (LitServe's workers outlive their parent).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inferpool.harness.client import status

Command = Callable[[int], Sequence[str]]
"""The argv that serves on the given 127.0.0.1 port."""

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout (site-packages once installed): it leads a server's PYTHONPATH, so that a server
under test can import the tests' own models and the load tests' peers."""
INFERPOOL = shutil.which("inferpool", path=str(Path(sys.executable).parent)) or "inferpool"
LOG_TAIL = 4000  # characters of the server's log in an error


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def inferpool_serve(*args: str, program: Sequence[str] = (INFERPOOL,)) -> Command:
    """``inferpool serve *args`` on the port; ``--host`` and ``--port`` come last, so they win.
    gRPC is off unless ``args`` set ``--grpc-port`` (they come after, so they win): its default
    is one fixed port, which two servers at once would contend for."""
    return lambda port: [*program, "serve", "--grpc-port", "0", *args, "--host", "127.0.0.1", "--port", str(port)]


def python_module(module: str, *args: str) -> Command:
    """``python -m module *args --port N`` with this interpreter."""
    return lambda port: [sys.executable, "-m", module, *args, "--port", str(port)]


@dataclass
class Server:
    """A started server: its URL, process, log and the name it is reported under."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    name: str = "server"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until(self, path: str, timeout: float, answer: int | None = 200) -> None:
        """Until ``GET path`` answers ``answer`` (any status with None: listening); raises if the
        server exits first or the time runs out, with the end of its log."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with status {self.process.returncode}:\n{self._tail()}")
            got = status(self.port, path)
            if got is not None and (answer is None or got == answer):
                return
            if time.monotonic() > deadline:
                state = "listening" if answer is None else f"answering {answer} on {path}"
                raise TimeoutError(f"{self.name} was not {state} within {timeout:g}s:\n{self._tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # what its group left behind, if anything
            os.killpg(self.process.pid, signal.SIGTERM)
            time.sleep(0.5)
            os.killpg(self.process.pid, signal.SIGKILL)

    def _tail(self) -> str:
        return self.output()[-LOG_TAIL:]


@contextmanager
def launch(
    command: Command,
    log_dir: Path | None = None,
    *,
    name: str = "server",
    ready_path: str = "/health/ready",
    ready_answer: int | None = 200,
    ready_timeout: float = 120.0,
    stop_timeout: float = 30.0,
    cpus: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[Server]:
    """Run ``command`` on a free port until ``ready_path`` answers ``ready_answer``; yield the
    server; stop it. The log is ``log_dir/<name>-<port>.log`` (kept), or a temporary file
    (removed). ``cpus`` pins it (and every process and thread it starts) with ``taskset``;
    ``env`` wins over the inherited environment (``PYTHONPATH`` too); ``cwd`` is where it starts."""
    port = free_port()
    if log_dir is None:
        descriptor, temporary = tempfile.mkstemp(prefix=f"inferpool-{_slug(name)}-", suffix=".log")
        os.close(descriptor)
        log = Path(temporary)
    else:
        log = log_dir / f"{_slug(name)}-{port}.log"
    prefix = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*prefix, *command(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})},
            start_new_session=True,
            cwd=cwd,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log, name)
    try:
        server.wait_until(ready_path, ready_timeout, ready_answer)
        yield server
    finally:
        server.stop(stop_timeout)
        if log_dir is None:
            log.unlink(missing_ok=True)


def _slug(name: str) -> str:
    return name.replace(" ", "_").replace("/", "_")


@contextmanager
def run_server(log_dir: Path | None, *args: str, ready_timeout: float = 60.0) -> Iterator[Server]:
    """``inferpool serve *args``, yielded as soon as it listens (its standby server answers while
    the models load): ``wait_ready`` waits for the models."""
    with launch(
        inferpool_serve(*args), log_dir, ready_path="/health/live", ready_answer=None, ready_timeout=ready_timeout
    ) as server:
        yield server


def wait_ready(server: Server, timeout: float = 60.0) -> None:
    server.wait_until("/health/ready", timeout)
