"""A forming batch waits for company only while waiting finds some: at one connection nobody
ever comes, and every lone request waited the whole ``max_queue_delay_us`` (digits, batching 8:
0.19x batching off at one connection). After a few waits that found nobody the batcher runs
lone requests at once, probes now and then, and waits again as soon as a probe finds company."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from inferpool.engine.executors.base import ExecutorConfig
from inferpool.engine.executors.batching import Batcher
from inferpool.engine.executors.patience import FIRST_PROBE, GIVE_UP, LAST_PROBE, Patience
from inferpool.engine.serving.admission import Admission, ServiceTimes
from tests.support.pipelines import fake_pipeline
from tests.unit.engine.test_batching import FakeModel, submit

DELAY = 0.2  # long enough that a wait shows in wall time beside a call of microseconds


def test_it_gives_up_after_fruitless_waits_and_probes_ever_more_rarely():
    patience = Patience()
    for _ in range(GIVE_UP):
        assert patience.waits()
        patience.found(False)
    skipped = 0
    while not patience.waits():
        skipped += 1
    assert skipped == FIRST_PROBE - 1  # then a probe
    patience.found(False)
    assert patience.every == 2 * FIRST_PROBE
    for _ in range(20):
        patience.found(False)
    assert patience.every == LAST_PROBE
    patience.found(True)  # a probe found company: patient again, at once
    assert (patience.fruitless, patience.every) == (0, FIRST_PROBE)
    assert patience.waits()


def adaptive(fake: FakeModel, adaptive_wait: bool = True, max_batch_size: int = 8, inline: bool = False) -> Batcher:
    config = ExecutorConfig(
        name="test", threads=1, initializer=lambda: None, max_batch_size=max_batch_size, max_delay=DELAY,
        adaptive_wait=adaptive_wait, inline_when_idle=inline, call_seconds=lambda rows: 0.001,
    )  # fmt: skip
    admission = Admission(ServiceTimes(), 1, max_batch_size, capacity=64)  # counts out, as the server's
    return Batcher(fake_pipeline(fake.run, admission=admission), config)


def one_at_a_time(batcher: Batcher, count: int) -> list[float]:
    """Seconds of each of ``count`` requests sent one after another, as one connection does
    (through ``infer``, admission included, as the service calls it)."""

    async def serially() -> list[float]:
        seconds = []
        for i in range(count):
            started = time.perf_counter()
            await batcher.infer(np.full((1, 3), i).tolist(), None, None)
            seconds.append(time.perf_counter() - started)
        return seconds

    return asyncio.run(serially())


def test_one_connection_stops_waiting_for_company_that_never_comes():
    batcher = adaptive(FakeModel())
    try:
        seconds = one_at_a_time(batcher, GIVE_UP + 8)
    finally:
        batcher.close()
    assert all(s >= DELAY * 0.9 for s in seconds[:GIVE_UP])  # each waited its whole delay
    assert sum(seconds[GIVE_UP:]) < DELAY  # then none did: eight lone requests in less than one wait


def test_wait_for_company_on_keeps_waiting():
    batcher = adaptive(FakeModel(), adaptive_wait=False)
    try:
        seconds = one_at_a_time(batcher, GIVE_UP + 2)
    finally:
        batcher.close()
    assert all(s >= DELAY * 0.9 for s in seconds)


def test_a_wait_that_fills_its_batch_makes_it_wait_again():
    fake = FakeModel()
    batcher = adaptive(fake, max_batch_size=2)

    async def together() -> None:
        first = asyncio.ensure_future(submit(batcher, np.full((1, 3), 0).tolist()))
        await asyncio.sleep(DELAY / 4)  # while the first one waits: company
        await asyncio.gather(first, submit(batcher, np.full((1, 3), 1).tolist()))

    try:
        one_at_a_time(batcher, GIVE_UP)
        assert batcher._patience is not None
        batcher._patience.every = 1  # the next lone batch is a probe
        asyncio.run(together())
    finally:
        batcher.close()
    assert fake.calls[-1] == (2, 3)  # the probe waited, and the second request filled it
    assert (batcher._patience.fruitless, batcher._patience.every) == (0, FIRST_PROBE)  # patient again


def test_company_that_leaves_the_batch_short_does_not_count():
    fake = FakeModel()
    batcher = adaptive(fake)  # batches of 8: two requests never fill one

    async def pair() -> None:
        first = asyncio.ensure_future(submit(batcher, np.full((1, 3), 0).tolist()))
        await asyncio.sleep(DELAY / 4)
        await asyncio.gather(first, submit(batcher, np.full((1, 3), 1).tolist()))

    try:
        for _ in range(GIVE_UP):
            asyncio.run(pair())
        assert batcher._patience is not None
        assert batcher._patience.given_up
    finally:
        batcher.close()


def test_given_up_it_runs_idle_requests_on_the_event_loop_and_probes_through_the_leader():
    fake = FakeModel()
    threads: list[str] = []
    run = fake.run

    def tracked(arrays):
        threads.append(threading.current_thread().name)
        return run(arrays)

    fake.run = tracked  # type: ignore[method-assign]
    batcher = adaptive(fake, inline=True)
    try:
        one_at_a_time(batcher, GIVE_UP)  # four waits that never filled a batch
        assert batcher._patience is not None
        assert batcher._patience.given_up
        threads.clear()
        seconds = one_at_a_time(batcher, FIRST_PROBE)
    finally:
        batcher.close()
    here = threading.current_thread().name
    assert threads[: FIRST_PROBE - 1] == [here] * (FIRST_PROBE - 1)  # inline, no hand-off
    assert threads[-1] != here  # the probe went to the leader, and waited
    assert seconds[-1] >= DELAY * 0.9
