"""Request priorities in the engine: each level's room in admission, the leveled queue, and the
order the worker threads and the batcher take requests in."""

from __future__ import annotations

import asyncio
import threading
from queue import Empty

import numpy as np
import pytest

from inferpool.engine.errors import Overloaded
from inferpool.engine.executors import EXECUTORS, ExecutorConfig
from inferpool.engine.serving.admission import Admission, ServiceTimes
from inferpool.engine.serving.priorities import LeveledQueue, room
from inferpool.engine.serving.requests import Work
from tests.support.pipelines import Recorded, fake_pipeline


class Item:
    def __init__(self, name: str, level: int) -> None:
        self.name = name
        self.level = level


def test_room_shrinks_by_a_share_per_level_below_the_highest():
    assert [room(64, level, 1) for level in (0, 1)] == [64, 64]
    assert [room(64, level, 2) for level in (0, 1, 2)] == [64, 64, 32]
    assert [room(60, level, 3) for level in (1, 2, 3)] == [60, 40, 20]
    assert room(1, 4, 4) == 1  # never below one: a lone low request is still served when nothing runs
    assert room(64, 9, 2) == 32  # a level past the last counts as the last


def test_the_queue_hands_out_the_highest_level_first_each_level_in_order():
    queue: LeveledQueue[Item] = LeveledQueue(3)
    for name, level in [("low-1", 3), ("mid-1", 2), ("low-2", 3), ("high-1", 1), ("none", 0), ("mid-2", 2)]:
        queue.put(Item(name, level))
    queue.put(None)  # an executor's stop sign: behind every level
    taken = [queue.get(block=False) for _ in range(7)]
    assert [item.name if item is not None else None for item in taken] == [
        "high-1", "none", "mid-1", "mid-2", "low-1", "low-2", None,
    ]  # fmt: skip
    with pytest.raises(Empty):
        queue.get(block=False)
    with pytest.raises(Empty):
        queue.get(timeout=0.01)
    assert queue.qsize() == 0


def test_the_queue_loses_and_repeats_nothing_under_concurrent_takers():
    queue: LeveledQueue[Item] = LeveledQueue(2)
    count = 4000
    taken: list[str] = []
    lock = threading.Lock()

    def take() -> None:
        while True:
            item = queue.get(timeout=5)
            if item is None:
                return
            with lock:
                taken.append(item.name)

    def put(start: int) -> None:
        for i in range(start, count, 2):
            queue.put(Item(str(i), 1 + i % 2))

    takers = [threading.Thread(target=take) for _ in range(4)]
    putters = [threading.Thread(target=put, args=(start,)) for start in (0, 1)]
    for thread in (*takers, *putters):
        thread.start()
    for thread in putters:
        thread.join()
    for _ in takers:
        queue.put(None)
    for thread in takers:
        thread.join(10)
    assert sorted(taken, key=int) == [str(i) for i in range(count)]


def test_admission_refuses_the_lowest_level_first():
    admission = Admission(ServiceTimes(), 1, 1, capacity=4)
    admission.levels = 2
    admission.admit(1, None, "m", 2)
    admission.admit(1, None, "m", 2)
    with pytest.raises(Overloaded, match="priority 2 is refused beyond 2"):
        admission.admit(1, None, "m", 2)
    admission.admit(1, None, "m", 1)
    admission.admit(1, None, "m", 0)  # none named: the engine's callers outside the door
    with pytest.raises(Overloaded):
        admission.admit(1, None, "m", 1)
    assert admission.requests == 4


class Gated:
    """A fake model whose calls wait for ``gate`` and record what each ran (its rows' first values)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.calls: list[list[int]] = []

    def run(self, arrays):
        self.started.set()
        self.gate.wait(10)
        x = arrays["x"]
        self.calls.append([int(v) for v in x[:, 0]])
        return {"y": x * 2}


def executor(kind: str, fake: Gated, levels: int, max_batch_size: int = 1):
    admission = Recorded(max_batch_size)
    admission.levels = levels
    config = ExecutorConfig(
        name=f"test-{kind}", threads=1, initializer=lambda: None, max_batch_size=max_batch_size,
        max_delay=0.0, call_seconds=lambda rows: 0.0,
    )  # fmt: skip
    return EXECUTORS[kind](fake_pipeline(fake.run, admission), config)


def _submit_behind_a_running_call(kind: str, levels: int, max_batch_size: int, order: list[tuple[int, int]]):
    """One request runs and holds the only worker; ``order`` ((value, level), ...) queues behind it."""
    fake = Gated()
    ex = executor(kind, fake, levels, max_batch_size)

    async def scenario():
        first = asyncio.ensure_future(ex.run(Work([[0.0]], 1, None)))
        while not fake.started.is_set():
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(ex.run(Work([[float(v)]], 1, None, level=lvl))) for v, lvl in order]
        await asyncio.sleep(0.05)  # all queued behind the running call
        fake.gate.set()
        return await asyncio.gather(first, *rest)

    try:
        predictions = asyncio.run(scenario())
    finally:
        ex.close()
    for prediction, (value, _) in zip(predictions[1:], order, strict=True):
        np.testing.assert_array_equal(prediction.outputs["y"], [[2.0 * value]])
    return fake.calls[1:]


def test_worker_threads_take_higher_levels_first():
    calls = _submit_behind_a_running_call("threads", 2, 1, [(1, 2), (2, 2), (3, 1), (4, 1), (5, 2), (6, 1)])
    assert calls == [[3], [4], [6], [1], [2], [5]]


def test_with_one_level_the_order_is_arrival():
    calls = _submit_behind_a_running_call("threads", 1, 1, [(1, 2), (2, 2), (3, 1), (4, 1)])
    assert calls == [[1], [2], [3], [4]]


def test_the_batcher_batches_each_level_apart_and_runs_the_highest_first():
    calls = _submit_behind_a_running_call("batch", 2, 2, [(1, 2), (2, 2), (3, 1), (4, 2), (5, 1), (6, 1)])
    levels = {1: 2, 2: 2, 3: 1, 4: 2, 5: 1, 6: 1}
    assert all(len({levels[v] for v in call}) == 1 for call in calls), calls  # no batch mixes levels
    ran = [v for call in calls for v in call]
    assert sorted(ran) == [1, 2, 3, 4, 5, 6]
    assert ran[:3] == [3, 5, 6], calls  # every high request before any low one
