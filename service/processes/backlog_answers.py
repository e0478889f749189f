"""Answers on the listening socket while no serving process does.

Two moments have a bound socket and nobody to serve it: while the supervisor loads the models
(a probe or an early client would otherwise wait in the listen backlog with no answer), and
after the last serving process has drained (connections still in the backlog would be reset
when the socket closes, though their clients may already have sent a request). Both get a real
HTTP answer from the standard library's server: 200 for liveness while loading, otherwise a
503 with ``Retry-After``, always with ``Connection: close``, in the JSON shape the routes use,
written by the writer the connection guard uses (service/apierror.py's ``closing_head``).
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

import orjson

from inferpool.service.apierror import closing_head, error_body
from inferpool.service.processes.closing import Closer
from inferpool.service.readiness import Readiness

log = logging.getLogger(__name__)
MAX_DISCARD = 64 << 20  # request bodies read and dropped, so that closing does not reset
CLIENT_SECONDS = 2.0  # how long one slow client may hold a standby thread
LIVENESS = ("/health/live", "/v2/health/live")
HEALTH = ("/live", "/ready")


class _Answer(BaseHTTPRequestHandler):
    server: StandbyServer
    protocol_version = "HTTP/1.1"
    timeout = CLIENT_SECONDS

    def _answer(self) -> None:
        try:
            length = min(int(self.headers.get("content-length") or 0), MAX_DISCARD)
        except ValueError:
            length = 0
        while length > 0 and (chunk := self.rfile.read(min(length, 1 << 16))):
            length -= len(chunk)
        path, state = self.path.split("?")[0], self.server.state
        live = path in LIVENESS and state == Readiness.LOADING
        status = HTTPStatus.OK if live else HTTPStatus.SERVICE_UNAVAILABLE
        error = f"model is not ready ({state})"
        # The shapes the routes answer: health probes say the status, other routes the error.
        if path.endswith(HEALTH):
            body = orjson.dumps({"status": state, "error": None if live else error})
        else:
            body = error_body(error)
        head = closing_head(status, len(body), retry_after=not live)
        self.wfile.write(head if self.command == "HEAD" else head + body)
        self.log_request(status)
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _answer

    def log_message(self, format: str, *args: object) -> None:
        log.debug("standby: " + format, *args)


class StandbyServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """The stdlib server on a duplicate of the listening socket (closing it leaves the
    original open for whoever serves next)."""

    daemon_threads = False  # server_close() joins them: no thread may outlive a fork
    block_on_close = True

    def __init__(self, listener: socket.socket, state: Readiness) -> None:
        super().__init__(listener.getsockname(), _Answer, bind_and_activate=False)
        self.socket.close()
        self.socket = listener.dup()
        self.state = state
        self.handled = 0

    def process_request(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        self.handled += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        # A lingering close: half-close, then read to the client's EOF. Closing with unread
        # bytes in the receive buffer would send a reset, and the client could lose our answer.
        if isinstance(request, socket.socket):
            try:
                request.shutdown(socket.SHUT_WR)
                request.settimeout(CLIENT_SECONDS)
                while request.recv(1 << 16):
                    pass
            except OSError:
                pass
        self.close_request(request)


class Standby:
    """Serves a StandbyServer on a thread until ``stop()``; ``stop()`` joins every thread."""

    def __init__(self, listener: socket.socket, state: Readiness) -> None:
        self.server = StandbyServer(listener, state)
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), name="standby")
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self._thread.join()
        self.server.server_close()


def answer_backlog(listener: socket.socket, seconds: float) -> int:
    """Stop new connections at the kernel, answer every connection already queued, then close
    ``listener`` (service/processes/closing.py says how and why). Without the stop, a client reconnecting
    after each 503 keeps the backlog non-empty, and closing the socket resets whoever is queued."""
    closer = Closer(listener)
    mechanism = closer.stop_new()
    server = StandbyServer(listener, Readiness.STOPPING)
    server.timeout = 0.05
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            before = server.handled
            server.handle_request()
            if server.handled == before:
                break  # nothing queued for 50 ms
    finally:
        server.server_close()
        closer.close()
    log.info("new connections stopped before closing by: %s", mechanism)
    return server.handled
