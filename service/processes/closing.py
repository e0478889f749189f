"""Stops new connections at the kernel before the listening socket closes, without privileges.

Closing a listening socket resets every connection still in its accept queue, and those clients
may already have sent a request: lost. So the last step of a drain first makes the kernel refuse
to queue anything new, then answers what is queued, then closes an empty queue. Two ways:

- ``reuseport``: the listener joins a SO_REUSEPORT group with a *plug*, a second listening
  socket with a backlog of 0 that holds exactly one connection of our own. A classic BPF
  program on the group (SO_ATTACH_REUSEPORT_CBPF) first sends only that connection to the plug,
  then every new SYN: the plug's queue is full, so the kernel drops them (the client retransmits
  after ~1 s and meets a closed port: refused, nothing sent). No capability is needed.
- ``socket-filter``: a drop-all SO_ATTACH_FILTER on the listener. Since Linux commit
  5d39580f68e6 this needs CAP_NET_ADMIN on TCP sockets, which a container's non-root user never
  has (Docker and Kubernetes drop it; ``--cap-add`` does not reach uid 10001): EPERM.

The first that works is used and logged; if neither does, queued connections may be reset.
"""

from __future__ import annotations

import ctypes
import logging
import socket
import struct
import time

from inferpool.service.readiness import Readiness

log = logging.getLogger(__name__)
SO_ATTACH_FILTER = 26  # linux/asm-generic/socket.h
SO_ATTACH_REUSEPORT_CBPF = 51
SKF_NET_OFF = -0x100000  # classic BPF: offsets from the network header
PLUG_SECONDS = 1.0  # for our own connection to reach the plug's queue


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def _attach(sock: socket.socket, option: int, code: list[tuple[int, int, int, int]]) -> None:
    instructions = (_Instruction * len(code))(*(_Instruction(c, jt, jf, k & 0xFFFFFFFF) for c, jt, jf, k in code))
    program = _Program(len(code), instructions)
    # The kernel copies the program during the call: the buffers need not outlive it.
    sock.setsockopt(socket.SOL_SOCKET, option, ctypes.string_at(ctypes.addressof(program), ctypes.sizeof(program)))


def _ret(k: int) -> tuple[int, int, int, int]:
    return (0x06, 0, 0, k)  # BPF_RET | BPF_K


def _to_plug_if_from(port: int, ipv6: bool) -> list[tuple[int, int, int, int]]:
    """Socket index 1 (the plug) for a SYN from ``port``, else 0 (the listener)."""
    # ldh [net + 40] (IPv6: fixed 40-byte header, our connection has no extension headers), or
    # ldxb 4*([net] & 0xf); ldh [x + net] (IPv4: past the header's own length): the TCP source port.
    v6 = [(0x28, 0, 0, SKF_NET_OFF + 40)]
    v4 = [(0xB1, 0, 0, SKF_NET_OFF), (0x48, 0, 0, SKF_NET_OFF)]
    load = v6 if ipv6 else v4
    return [*load, (0x15, 0, 1, port), _ret(1), _ret(0)]  # jeq #port


class Closer:
    """Holds new connections off ``listener`` from ``stop_new()`` on; ``close()`` closes all."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.mechanism = "none"
        self._extra: list[socket.socket] = []

    def stop_new(self) -> str:
        try:
            self._plug()
            self.mechanism = "reuseport"
        except OSError as exc:
            self._close_extra()
            log.debug("reuseport plug unavailable (%s)", exc)
            try:
                _attach(self.listener, SO_ATTACH_FILTER, [_ret(0)])
                self.mechanism = "socket-filter"
            except OSError as filter_exc:
                log.warning(
                    "could not stop new connections before closing (reuseport plug: %s; socket filter: %s): "
                    "some may be reset",
                    exc,
                    filter_exc,
                )
        return self.mechanism

    def _plug(self) -> None:
        family, address = self.listener.family, self.listener.getsockname()
        ipv6 = family == socket.AF_INET6
        plug = socket.socket(family, socket.SOCK_STREAM)
        self._extra.append(plug)
        plug.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        plug.bind(address)
        own = socket.socket(family, socket.SOCK_STREAM)
        self._extra.append(own)
        loopback = "::1" if ipv6 else "127.0.0.1"
        own.bind((loopback, 0))
        plug.listen(0)  # the group exists from here: the listener is index 0, the plug index 1
        # Until the next line a client's SYN may hash onto the plug; it is taken off below.
        _attach(self.listener, SO_ATTACH_REUSEPORT_CBPF, _to_plug_if_from(own.getsockname()[1], ipv6))
        self._answer_strays(plug)
        target = self.listener.getsockname()[1]
        bound = address[0] if address[0] not in ("0.0.0.0", "::") else loopback
        own.settimeout(PLUG_SECONDS)
        own.connect((bound, target))
        if _queued(plug) != 1:
            raise OSError("our connection did not reach the plug")
        _attach(self.listener, SO_ATTACH_REUSEPORT_CBPF, [_ret(1)])  # every new SYN: a full queue

    def _answer_strays(self, plug: socket.socket) -> None:
        from inferpool.service.processes.backlog_answers import StandbyServer  # standby imports this module

        server = StandbyServer(plug, Readiness.STOPPING)
        server.timeout = 0.05
        try:
            while True:
                before = server.handled
                server.handle_request()
                if server.handled == before:
                    break
        finally:
            server.server_close()

    def _close_extra(self) -> None:
        for sock in reversed(self._extra):
            sock.close()
        self._extra.clear()

    def close(self) -> None:
        self.listener.close()  # empty by now; then the plug, whose one connection is ours
        self._close_extra()


def _queued(listener: socket.socket) -> int:
    """Connections in a listening socket's accept queue (tcp_info's tcpi_unacked)."""
    deadline = time.monotonic() + PLUG_SECONDS
    while True:
        info = listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        queued = struct.unpack_from("I", info, 24)[0]
        if queued or time.monotonic() > deadline:
            return int(queued)
        time.sleep(0.001)
