"""SpreadAcceptor and ConnectionCounts (inferpool.service.processes.spread) on a real loop and socket, with the
other serving processes' counts written by the test."""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace

from inferpool.service.processes import spread
from inferpool.service.processes.process_states import DOWN, READY, ProcessBoard
from inferpool.service.processes.spread import CLOSED, ConnectionCounts, SpreadAcceptor


class _Kept(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport


class _Http(_Kept):
    """Each chunk received is a request head: a cycle whose keep_alive the acceptor may turn off."""

    cycles: list[SimpleNamespace]

    def data_received(self, data: bytes) -> None:
        self.cycle = SimpleNamespace(keep_alive=True)
        type(self).cycles.append(self.cycle)
        self.on_headers_complete()

    def on_headers_complete(self) -> None:
        pass


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


async def _until(condition, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


def test_fewest_elsewhere_counts_only_other_ready_processes_that_accept():
    board = ProcessBoard(4)
    counts = ConnectionCounts(4)
    for slot, (state, count) in enumerate([(READY, 9), (READY, 3), (DOWN, 0), (READY, CLOSED)]):
        board.mark(slot, state)
        counts.set(slot, count)
    assert counts.fewest_elsewhere(0, board) == 3  # slot 2 is down (its 0 is stale), slot 3 accepts no more
    assert counts.fewest_elsewhere(1, board) == 9
    board.mark(0, DOWN)
    assert counts.fewest_elsewhere(1, board) is None  # nobody else would take a connection


def test_takes_connections_while_it_holds_no_more_than_the_others_and_counts_them():
    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        counts.set(1, 1)  # the other process holds one connection
        acceptor = SpreadAcceptor(listener, _Kept, {}, counts, slot=0, board=None)
        address = listener.getsockname()
        first = socket.create_connection(address)
        await _until(lambda: acceptor.accepted == 1)
        second = socket.create_connection(address)  # 1 vs 1: still even, taken
        await _until(lambda: acceptor.accepted == 2)
        assert acceptor.deferred == 0
        assert counts.get(0) == 2
        first.close()
        await _until(lambda: counts.get(0) == 1)  # a closed connection stops counting
        second.close()
        await _until(lambda: counts.get(0) == 0)
        acceptor.close()
        assert counts.get(0) == CLOSED
        listener.close()

    asyncio.run(scenario())


class _SeesItsEof(_Kept):
    """Notes this process's published count in the loop iteration after its client's EOF: the
    one where its connection is closed but connection_lost has not run yet."""

    counts: ConnectionCounts
    seen: list[int]

    def eof_received(self) -> None:
        asyncio.get_running_loop().call_soon(lambda: type(self).seen.append(type(self).counts.get(0)))


def test_a_connection_stops_counting_at_its_clients_eof_not_a_loop_iteration_later():
    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        _SeesItsEof.counts, _SeesItsEof.seen = counts, []
        acceptor = SpreadAcceptor(listener, _SeesItsEof, {}, counts, slot=0, board=None)
        client = socket.create_connection(listener.getsockname())
        await _until(lambda: counts.get(0) == 1)
        client.close()
        await _until(lambda: _SeesItsEof.seen)
        assert _SeesItsEof.seen == [0]  # already out while the transport closes
        await asyncio.sleep(0.05)  # connection_lost has come and gone: counted out once, not twice
        assert counts.get(0) == 0
        assert acceptor.open == 0
        acceptor.close()
        listener.close()

    asyncio.run(scenario())


def test_leaves_a_connection_to_a_process_with_fewer_then_takes_it_if_nobody_does():
    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        acceptor = SpreadAcceptor(listener, _Kept, {}, counts, slot=0, board=None)
        address = listener.getsockname()
        clients = [socket.create_connection(address)]
        await _until(lambda: acceptor.accepted == 1)
        clients.append(socket.create_connection(address))  # 1 vs 0: left for the other process...
        await _until(lambda: acceptor.accepted == 2)  # ...which never takes it: overdue, taken here
        assert acceptor.deferred == 1
        counts.set(1, 0)
        clients.append(socket.create_connection(address))
        await _until(lambda: acceptor.deferred == 2)
        counts.set(1, 2)  # the other process caught up meanwhile: 2 vs 2, taken
        await _until(lambda: acceptor.accepted == 3)
        acceptor.close()
        clients.append(socket.create_connection(address))
        await asyncio.sleep(0.05)
        assert acceptor.accepted == 3  # closed: nothing more is taken
        for client in clients:
            client.close()
        listener.close()

    asyncio.run(scenario())


def test_sheds_one_connection_at_a_time_when_it_holds_two_more_than_another_process():
    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        _Http.cycles = []
        acceptor = SpreadAcceptor(listener, _Http, {}, counts, slot=0, board=None)
        address = listener.getsockname()
        clients = [socket.create_connection(address) for _ in range(3)]
        await _until(lambda: acceptor.accepted == 3)  # the other process holds 0 and never takes any
        counts.set(1, 1)
        for client in clients:
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        await _until(lambda: len(_Http.cycles) == 3)
        # 3 against 1: one answer closes its connection; the next waits for that one to end.
        assert [cycle.keep_alive for cycle in _Http.cycles].count(False) == 1
        assert acceptor.shed == 1
        counts.set(1, 2)  # 3 against 2: even enough, nothing more is shed
        shed = next(i for i, cycle in enumerate(_Http.cycles) if not cycle.keep_alive)
        clients.pop(shed).close()
        await _until(lambda: acceptor.open == 2)
        for client in clients:
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        await _until(lambda: len(_Http.cycles) == 5)
        assert all(cycle.keep_alive for cycle in _Http.cycles[3:])
        acceptor.close()
        for client in clients:
            client.close()
        listener.close()

    asyncio.run(scenario())


def test_a_closed_acceptor_leaves_its_slot_to_the_replacement_that_shares_it():
    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        old = SpreadAcceptor(listener, _Kept, {}, counts, slot=0, board=None)
        client = socket.create_connection(listener.getsockname())
        await _until(lambda: old.open == 1)
        old.close()  # retired: its connection lives on until the client goes
        assert counts.get(0) == CLOSED
        counts.set(0, 3)  # the replacement in the same slot counts its own
        client.close()
        await _until(lambda: old.open == 0)
        assert counts.get(0) == 3
        listener.close()

    asyncio.run(scenario())


def test_request_heads_read_the_other_counts_at_most_once_a_look_until_a_connection_comes_or_goes(monkeypatch):
    monkeypatch.setattr(spread, "LOOK_SECONDS", 60.0)  # one look spans the whole test, however slow the machine

    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        _Http.cycles = []
        counts.set(1, 2)  # even with this process's 2: nothing to shed, every head may look
        acceptor = SpreadAcceptor(listener, _Http, {}, counts, slot=0, board=None)
        looks: list[int] = []
        read = counts.fewest_elsewhere

        def counted(slot: int, board: ProcessBoard | None) -> int | None:
            looks.append(slot)
            return read(slot, board)

        counts.fewest_elsewhere = counted  # type: ignore[method-assign]
        address = listener.getsockname()
        clients = [socket.create_connection(address) for _ in range(2)]
        await _until(lambda: acceptor.accepted == 2)
        looks.clear()  # accepting reads them too; only the heads' reads count here
        for sent in range(1, 6):
            clients[sent % 2].sendall(b"GET / HTTP/1.1\r\n\r\n")
            await _until(lambda sent=sent: len(_Http.cycles) == sent)
        assert len(looks) == 1  # five heads within LOOK_SECONDS: one read of the shared counts
        clients.append(socket.create_connection(address))  # this process's count changed: look again
        await _until(lambda: acceptor.accepted == 3)
        looks.clear()
        clients[0].sendall(b"GET / HTTP/1.1\r\n\r\n")
        await _until(lambda: len(_Http.cycles) == 6)
        assert len(looks) == 1
        acceptor.close()
        for client in clients:
            client.close()
        listener.close()

    asyncio.run(scenario())


def test_queued_connections_reads_the_listening_sockets_accept_queue():
    listener = _listener()
    clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
    for _ in range(200):  # the handshakes complete in the kernel, a moment after connect returns
        if spread.queued_connections(listener) == 3:
            break
        time.sleep(0.005)
    assert spread.queued_connections(listener) == 3
    listener.accept()[0].close()
    assert spread.queued_connections(listener) == 2
    for client in clients:
        client.close()
    listener.close()


def test_fair_take_is_the_even_share_of_what_is_held_and_queued_at_least_one():
    assert spread.fair_take(0, [0], 32) == 16  # a burst on an idle pair: half here
    assert spread.fair_take(0, [16], 16) == 16  # the other took its half: the rest here
    assert spread.fair_take(3, [5, 4], 6) == 3  # (3 + 9 + 6) / 3 = 6 each: 3 more here
    assert spread.fair_take(8, [0], 4) == 1  # already over its share: one, as the deferral allowed
    assert spread.fair_take(0, [], 5) == 5  # alone: the whole queue
    assert spread.fair_take(0, [0], None) == 1  # queue length unknown: one per wake-up
    assert spread.fair_take(0, [0], 0) == 1


def test_a_burst_is_taken_in_one_wake_up_even_while_the_loop_is_busy():
    async def scenario() -> None:
        listener, counts = _listener(), ConnectionCounts(2)
        acceptor = SpreadAcceptor(listener, _Kept, {}, counts, slot=0, board=None)
        address = listener.getsockname()
        clients = [socket.create_connection(address) for _ in range(8)]
        await _until(lambda: spread.queued_connections(listener) == 8 or acceptor.accepted > 0)
        acceptor._readable()  # the one wake-up a loop busy with requests would give it
        assert acceptor.accepted == 4  # its half of the eight; the other process takes the rest
        assert counts.get(0) == 4
        for client in clients:
            client.close()
        acceptor.close()
        listener.close()

    asyncio.run(scenario())
