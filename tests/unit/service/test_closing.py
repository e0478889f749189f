"""Stopping new connections before a listening socket closes (service/processes/closing.py): with the
reuseport plug, what was queued stays acceptable, a new connection is never established (its
SYN is dropped, so it cannot send a request that a close would reset), and after the close the
port refuses. The plug needs no capability, so this holds for a container's non-root user."""

from __future__ import annotations

import socket

import pytest

from inferpool.service.processes.backlog_answers import answer_backlog
from inferpool.service.processes.closing import Closer

NOT_ESTABLISHED_SECONDS = 0.3  # the kernel retransmits a dropped SYN after 1 s


def _listener(family: socket.AddressFamily, host: str, reuseport: bool = True) -> socket.socket:
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((host, 0))
    listener.listen(64)
    return listener


@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_plug_keeps_the_queue_and_drops_new_connections(family, host):
    listener = _listener(family, host)
    port = listener.getsockname()[1]
    queued = [socket.create_connection((host, port)) for _ in range(3)]
    closer = Closer(listener)
    try:
        assert closer.stop_new() == "reuseport"
        with pytest.raises(TimeoutError):
            socket.create_connection((host, port), timeout=NOT_ESTABLISHED_SECONDS)
        listener.settimeout(NOT_ESTABLISHED_SECONDS)
        accepted = [listener.accept()[0] for _ in queued]
        assert sorted(c.getpeername()[1] for c in accepted) == sorted(q.getsockname()[1] for q in queued)
        with pytest.raises(TimeoutError):  # nothing else reached the listener: all went to the plug
            listener.accept()
        for conn in accepted:
            conn.close()
    finally:
        closer.close()
        for conn in queued:
            conn.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=NOT_ESTABLISHED_SECONDS)


def test_a_listener_without_reuseport_falls_back_to_the_socket_filter_or_says_it_cannot(caplog):
    listener = _listener(socket.AF_INET, "127.0.0.1", reuseport=False)
    closer = Closer(listener)
    try:
        mechanism = closer.stop_new()
    finally:
        closer.close()
    # The filter needs CAP_NET_ADMIN on TCP sockets (root on a host has it; a container user not).
    assert mechanism in ("socket-filter", "none")
    if mechanism == "none":
        assert "could not stop new connections before closing" in caplog.text


def test_answer_backlog_answers_the_queue_with_503_and_closes():
    listener = _listener(socket.AF_INET, "127.0.0.1")
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    assert answer_backlog(listener, 2.0) == 1
    client.settimeout(5)
    answer = b""
    while chunk := client.recv(1 << 16):
        answer += chunk
    client.close()
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert b"\r\nretry-after: 1\r\n" in answer
    assert answer.endswith(b'{"error":"model is not ready (stopping)"}')
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=NOT_ESTABLISHED_SECONDS)
