"""Stalled, slowloris, too many and malformed clients against the real server: each is cut off by a
deadline or refused at the door, and the server keeps serving everyone else."""

from __future__ import annotations

import contextlib
import json
import socket
import time

import httpx2
import numpy as np
import pytest

from inferpool.harness.server import Server, run_server, wait_ready

READ_TIMEOUT = 0.5
SAMPLE = {"inputs": np.zeros((1, 8, 8)).tolist()}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    args = ("--workers", "1", "--runtime.backend", "eager", "--read-timeout-seconds", str(READ_TIMEOUT))
    with run_server(tmp_path_factory.mktemp("slow"), *args, "--max-connections", "4") as running:
        wait_ready(running)
        yield running


def connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def read_all(sock: socket.socket) -> tuple[bytes, float]:
    """Everything until the server closes, and when it closed (monotonic)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks), time.monotonic()


def still_serves(server: Server) -> None:
    assert httpx2.post(server.url + "/predict", json=SAMPLE).status_code == 200


def assert_408(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in head.lower()
    assert "did not arrive within 0.5s" in json.loads(body)["error"]


def test_a_client_that_never_sends_is_answered_408_and_closed(server):
    with connect(server) as sock:
        started = time.monotonic()
        answer, closed_at = read_all(sock)
    assert_408(answer)
    assert READ_TIMEOUT * 0.8 < closed_at - started < READ_TIMEOUT + 3
    still_serves(server)


def test_slowloris_headers_are_cut_off(server):
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(20):  # a header line every 0.1 s: never complete
                time.sleep(0.1)
                sock.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass  # closed under us, as it should be
        answer, closed_at = read_all(sock)
    assert_408(answer)
    assert closed_at - started < READ_TIMEOUT + 3
    still_serves(server)


def read_answer(sock: socket.socket) -> bytes:
    """One whole answer on a kept-alive connection (its head, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_a_later_request_on_a_kept_alive_connection_gets_its_own_full_deadline(server):
    # The connection's one timer was set for the first request and fires during the second one:
    # the second must still get the whole timeout from its own first byte, then its 408.
    body = json.dumps(SAMPLE).encode()
    with connect(server) as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        assert read_answer(sock).startswith(b"HTTP/1.1 200 ")
        time.sleep(READ_TIMEOUT * 0.6)
        started = time.monotonic()
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")  # and no more
        answer, closed_at = read_all(sock)
    assert_408(answer)
    assert READ_TIMEOUT * 0.8 < closed_at - started < READ_TIMEOUT + 3
    still_serves(server)


def test_a_body_that_stops_arriving_closes_the_connection(server):
    with connect(server) as sock:
        sock.sendall(
            b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n"
        )
        sock.sendall(b'{"inputs": [')
        started = time.monotonic()
        try:
            answer, closed_at = read_all(sock)
        except ConnectionResetError:
            answer, closed_at = b"", time.monotonic()
    assert answer == b""  # the route had it: nobody to answer once the client is gone
    assert closed_at - started < READ_TIMEOUT + 3
    still_serves(server)
    text = httpx2.get(server.url + "/metrics").text
    assert 'inferpool_requests_total{route="/predict",status="499"}' in text  # not a server error
    assert 'status="500"' not in text


def test_beyond_max_connections_a_new_one_gets_503(server):
    # Four kept-alive connections (idle between requests they stay: uvicorn's keep-alive timeout).
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(httpx2.Client(base_url=server.url)) for _ in range(4)]
        for http in clients:
            assert http.get("/health/live").status_code == 200
        with connect(server) as fifth:
            answer, _ = read_all(fifth)
        assert clients[0].get("/health/live").status_code == 200  # the four still serve
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"retry-after: 1" in head.lower()
    assert "over 4 open connections" in json.loads(body)["error"]
    still_serves(server)


@pytest.mark.parametrize("length", [b"+5", b"-1", b"5, 5", b"\xd9\xa5", b"9" * 25])
def test_a_malformed_content_length_is_a_json_400(server, length):
    with connect(server) as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}")
        answer, _ = read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 413 ")), answer
    assert "error" in json.loads(body)
    still_serves(server)
