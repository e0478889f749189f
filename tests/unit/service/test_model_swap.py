"""The supervisor's model swap without a fork: what the serving processes send over their
channels is collected (readiness) and answered in order (repository calls), and a call it
refuses or cannot read forks nothing and answers why."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from inferpool.config import Settings
from inferpool.service.models.host import ModelHost, plans
from inferpool.service.models.repository_calls import RepositoryCalls
from inferpool.service.processes import supervisor_channel
from inferpool.service.processes.model_swap import ModelSwap

if TYPE_CHECKING:
    from inferpool.service.processes.supervisor import Supervisor


class Processes:
    """What a swap uses of the supervisor: its process table, and forking and reaping."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.children: dict[int, tuple[int, float]] = {}
        self.channels: dict[int, socket.socket] = {}
        self.ready: set[int] = set()
        self.retired: set[int] = set()

    def spawn(self, slot: int, listener: socket.socket, host: ModelHost, replacing: bool = False) -> int:
        raise AssertionError("nothing here changes the model set: no process is forked")

    def reap(self, listener: socket.socket, host: ModelHost) -> str:
        return "ok"


def test_the_swap_collects_readiness_and_answers_the_calls_in_order(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.pt2").write_bytes(b"not read by the scan")
    settings = Settings(model_repository=tmp_path, model_control_mode="explicit")
    processes = Processes(settings)
    swap = ModelSwap(cast("Supervisor", processes), RepositoryCalls(settings, plans(settings)), next_scan=0.0)
    calls: list[supervisor_channel.Message] = [
        {"op": "index", "ready": False},
        {"op": "load", "name": "../m", "body": {}},
        {"op": "pause"},
    ]
    with ExitStack() as sockets:
        ends: dict[int, socket.socket] = {}
        for pid in (11, 12):
            processes.channels[pid], ends[pid] = map(sockets.enter_context, supervisor_channel.pair())
            processes.children[pid] = (pid - 11, 0.0)
        supervisor_channel.send(ends[11], {"op": "ready"})
        for call in calls:
            supervisor_channel.send(ends[12], call)
        for _ in calls:  # each listen reads one message of each process that sent one
            swap.listen(1.0)
        assert processes.ready == {11}
        assert [message for _, message in swap.pending] == calls

        listener = sockets.enter_context(socket.socket())
        swap.answer(listener, cast(ModelHost, SimpleNamespace(planned=plans(settings))))
        answers = [supervisor_channel.receive(ends[12]) for _ in calls]
    refusal = answers[1]
    assert refusal is not None
    refused = refusal["body"]["error"]
    assert "no such model folder" in refused
    assert answers == [
        {"status": 200, "body": [{"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]},
        {"status": 400, "body": {"error": refused}},
        {"status": 400, "body": {"error": "unknown repository call 'pause'"}},
    ]
    assert swap.pending == []
    assert not swap.stop_requested
