"""The serving process's end of the supervisor channel: ``ready`` only once every part has
started, and a ``retire`` handed to every hook in order, before the answer that follows it."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from inferpool.service.processes import supervisor_channel


def test_ready_is_said_once_every_part_has_arrived_from_any_thread() -> None:
    said: list[str] = []
    arrive = supervisor_channel.announce_after(lambda: said.append("ready"), 2)
    loader = threading.Thread(target=arrive)  # the models, on the host's loader thread
    loader.start()
    loader.join()
    assert said == []  # the gRPC front end does not listen yet
    arrive()
    assert said == ["ready"]


@pytest.fixture
def ends() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = supervisor_channel.pair()
    with ours, theirs:
        yield ours, theirs


def test_ready_reaches_the_supervisor_only_after_both_parts(ends: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = ends
    arrive = supervisor_channel.announce_after(supervisor_channel.Control(theirs, "explicit").announce, 2)
    arrive()
    ours.setblocking(False)
    assert supervisor_channel.receive(ours) is None  # nothing sent: the read would block
    arrive()
    ours.setblocking(True)
    assert supervisor_channel.receive(ours) == {"op": "ready"}


def test_a_retire_runs_every_hook_in_order_before_the_answer_that_follows_it(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = ends
    seen: list[str] = []

    async def run() -> dict[str, object]:
        control = supervisor_channel.Control(theirs, "explicit")
        control.retire_hooks += [lambda: seen.append("http"), lambda: seen.append("grpc")]
        control.start()
        asking = asyncio.ensure_future(control.ask({"op": "load", "name": "m"}))
        await asyncio.sleep(0.05)
        assert supervisor_channel.receive(ours) == {"op": "load", "name": "m"}
        supervisor_channel.send(ours, {"op": "retire"})
        supervisor_channel.send(ours, {"status": 200, "body": {}})
        answer = await asking
        seen.append("answer")
        return answer

    assert asyncio.run(run()) == {"status": 200, "body": {}}
    assert seen == ["http", "grpc", "answer"]
