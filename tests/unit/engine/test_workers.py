"""ThreadSet and the queue behind QueuedWorkers, without a model: threads that start, die and
are replaced (or not), and what a closed executor answers to the requests it never reached."""

from __future__ import annotations

import asyncio
import threading
import time
from queue import SimpleQueue

import pytest

from inferpool.engine.errors import NotReady
from inferpool.engine.executors.threads import ThreadSet, refuse_queued
from inferpool.engine.serving.requests import Work


def eventually(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


class Released:
    """The slice of a Pipeline that refuse_queued uses: give the admission estimate back."""

    def __init__(self) -> None:
        self.estimates: list[int] = []

    def release(self, work: Work) -> None:
        self.estimates.append(work.estimate)


def test_every_thread_runs_the_initializer_before_wait_started_returns():
    initialised: list[str] = []
    stop = threading.Event()

    def work() -> None:
        stop.wait(5)

    threads = ThreadSet(3, "init", work, lambda: initialised.append(threading.current_thread().name))
    threads.wait_started(5)
    assert sorted(initialised) == ["init-0", "init-1", "init-2"]
    assert threads.count == threads.alive == 3
    threads.closing = True
    stop.set()
    threads.join(5)
    assert threads.alive == 0


def test_a_failing_initializer_is_reported_and_not_replaced():
    def initializer() -> None:
        raise RuntimeError("no warm-up for you")

    threads = ThreadSet(2, "broken", lambda: None, initializer)
    with pytest.raises(RuntimeError, match="no warm-up for you"):
        threads.wait_started(5)
    assert eventually(lambda: threads.alive == 0)
    assert threads.replaced == 0
    assert threads.count == 2  # alive < count: what readiness reports as degraded


def test_a_dead_thread_is_replaced_under_a_new_name_keeping_its_slot():
    names: list[str] = []
    stop = threading.Event()
    first = threading.Event()

    def work() -> None:
        names.append(threading.current_thread().name)
        if not first.is_set():
            first.set()
            raise SystemExit  # a BaseException from a job ends the thread that ran it
        stop.wait(5)

    threads = ThreadSet(1, "w", work)
    threads.wait_started(5)
    assert eventually(lambda: threads.replaced == 1 and threads.alive == 1)
    assert names == ["w-0", "w-1"]  # names are never reused
    threads.closing = True
    stop.set()
    threads.join(5)


def test_a_thread_ending_while_closing_is_not_replaced():
    def work() -> None:
        raise RuntimeError("stopping")

    stop = threading.Event()
    threads = ThreadSet(1, "closing", work, lambda: stop.wait(5))
    threads.closing = True
    stop.set()
    threads.wait_started(5)
    threads.join(5)
    assert threads.alive == 0
    assert threads.replaced == 0


def test_wait_started_times_out_naming_the_threads():
    release = threading.Event()
    threads = ThreadSet(1, "slow", lambda: None, lambda: release.wait(5))
    with pytest.raises(TimeoutError, match=r"slow threads did not start within 0\.05s"):
        threads.wait_started(0.05)
    release.set()
    threads.join(5)


def test_refuse_queued_answers_not_ready_and_keeps_the_stop_signs():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        queue: SimpleQueue[Work | None] = SimpleQueue()
        works = [Work({"x": i}, estimate=i + 1, deadline=None) for i in range(3)]
        futures = [work.attach(loop) for work in works]
        for item in (works[0], None, works[1], works[2], None):
            queue.put(item)
        pipeline = Released()
        refuse_queued(queue, pipeline)  # type: ignore[arg-type]
        assert pipeline.estimates == [1, 2, 3]  # each request's admission is given back
        for future in futures:
            with pytest.raises(NotReady, match="shutting down"):
                await asyncio.wait_for(future, 5)
        assert [queue.get_nowait(), queue.get_nowait()] == [None, None]
        assert queue.empty()

    asyncio.run(main())
