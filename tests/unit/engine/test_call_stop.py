"""CallStop: a call stops once every request riding in it has stopped waiting, and only then."""

from __future__ import annotations

import asyncio

from inferpool.engine.serving.call_stop import CallStop, running, take
from inferpool.engine.serving.requests import Work


def works(count: int) -> tuple[asyncio.AbstractEventLoop, list[Work]]:
    loop = asyncio.new_event_loop()
    found = [Work([[i]], 1, None) for i in range(count)]
    for work in found:
        work.attach(loop)
    return loop, found


def test_a_call_stops_when_its_only_caller_leaves():
    loop, (work,) = works(1)
    stops: list[int] = []
    switch = CallStop([work])
    switch.arm(lambda: stops.append(1))
    assert stops == []  # armed while its caller waits: it runs
    assert work.future is not None
    work.future.cancel()
    switch.pull()
    assert stops == [1]
    loop.close()


def test_a_batch_runs_on_while_one_of_its_callers_still_waits():
    loop, (first, second) = works(2)
    stops: list[int] = []
    switch = CallStop([first, second])
    switch.arm(lambda: stops.append(1))
    assert first.future is not None
    assert second.future is not None
    first.future.cancel()
    switch.pull()
    assert stops == []
    second.future.cancel()
    switch.pull()
    assert stops == [1]
    loop.close()


def test_a_caller_that_left_before_the_call_was_armed_stops_it_at_once():
    loop, (work,) = works(1)
    stops: list[int] = []
    switch = CallStop([work])
    assert work.future is not None
    work.future.cancel()
    switch.pull()  # nothing armed yet: nothing to stop, and nothing raised
    switch.arm(lambda: stops.append(1))
    assert stops == [1]
    loop.close()


def test_a_request_without_a_future_is_never_taken_for_gone():
    switch = CallStop([Work([[1]], 1, None)])
    stops: list[int] = []
    switch.arm(lambda: stops.append(1))
    switch.pull()
    assert stops == []


def test_the_threads_stop_is_taken_once():
    switch = CallStop([])
    assert take() is None
    running(switch)
    assert take() is switch
    assert take() is None  # a second run in the same step is another call
    running(switch)
    running(None)
    assert take() is None
