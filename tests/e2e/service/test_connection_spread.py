"""A few long-lived keep-alive clients, two serving processes: every process gets connections.

The processes accept from one listening socket, and without care the first to wake takes every
connection queued at that moment: with 2-4 clients that open at once (a proxy's pool, wrk) all
of them could sit on one process while the other idles (measured on ResNet-50: 4+0 gave 11.6
img/s, 2+2 gave 23.3). Each run here opens its clients in one burst, sends a request on each,
and asks the kernel which serving process holds each server-side socket.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from inferpool.harness.server import inferpool_serve, launch
from loadtest.procs import tree

RUNS = 10
REQUEST = b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"


def _socket_owners(pids: list[int]) -> dict[str, int]:
    """socket inode -> the pid holding it (the serving processes' open sockets)."""
    owners = {}
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        for fd in os.listdir(fds):
            try:
                target = os.readlink(fds / fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                owners[target[8:-1]] = pid
    return owners


def _inode_of_peer(server_port: int, client_port: int) -> str:
    """The inode of the server side of the connection from ``client_port`` (/proc/net/tcp): the
    established one, since an earlier connection from the same port may linger closing (TIME_WAIT,
    FIN_WAIT: inode 0, held by no process)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if (
            int(local.split(":")[1], 16) == server_port
            and int(remote.split(":")[1], 16) == client_port
            and state == "01"  # ESTABLISHED
        ):
            return fields[9]
    raise AssertionError(f"no server-side socket for client port {client_port}")


def _wait_idle(server_port: int, timeout: float = 10.0) -> None:
    """Until the server holds no connection (a closed one counts until its process sees the close)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        # 01 ESTABLISHED, 08 CLOSE_WAIT: open on the server's side
        if not any(int(row[1].split(":")[1], 16) == server_port and row[3] in ("01", "08") for row in rows):
            return
        time.sleep(0.01)
    raise AssertionError("the server kept connections open after their clients closed them")


def _answered(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def _kept(sock: socket.socket, port: int) -> socket.socket:
    """The client's connection once answered 200 and kept open: a process that took more than its
    share (its count of a connection closed in the run before not yet down) sheds one with
    ``Connection: close``, and the client reconnects, as HTTP/1.1 clients do
    (service/processes/spread.py)."""
    for _ in range(3):
        head = _answered(sock).split(b"\r\n\r\n")[0]
        assert b" 200 " in head.split(b"\r\n")[0]
        if b"connection: close" not in head.lower():
            return sock
        sock.close()
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(REQUEST)
    raise AssertionError("the connection was shed three times running")


def test_two_to_four_keep_alive_clients_reach_both_serving_processes():
    command = inferpool_serve("--model", "inferpool.engine.zoo.digits:build", "--workers", "2")
    with launch(command) as server:
        children = [pid for pid in tree(server.process.pid) if pid != server.process.pid]
        assert len(children) == 2, children
        spreads = []
        for run in range(RUNS):
            _wait_idle(server.port)  # the clients arrive on an idle server: nothing held from the last run
            clients = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2 + run % 3)]
            try:
                for sock in clients:  # all connected before the first request: one burst in the queue
                    sock.sendall(REQUEST)
                for index, sock in enumerate(clients):
                    clients[index] = _kept(sock, server.port)
                owners = _socket_owners(children)
                holders = [owners[_inode_of_peer(server.port, sock.getsockname()[1])] for sock in clients]
                spreads.append(sorted(holders.count(pid) for pid in children))
            finally:
                for sock in clients:
                    sock.close()
    # Even: no process holds two more than another (3 clients: 2+1).
    assert all(spread[-1] - spread[0] <= 1 for spread in spreads), (
        f"connections per serving process, each run: {spreads}"
    )
