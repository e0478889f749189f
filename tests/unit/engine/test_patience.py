"""A forming batch waits for company only while waiting finds some: at one connection nobody
ever comes, and every lone request waited the whole ``max_queue_delay_us`` (digits, batching 8:
0.19x batching off at one connection). After a few waits that found nobody the batcher runs
lone requests at once, probes now and then, and waits again as soon as a probe finds company."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from inferpool.engine.executors.base import ExecutorConfig
from inferpool.engine.executors.batching import Batcher
from inferpool.engine.executors.patience import FIRST_PROBE, GIVE_UP, LAST_PROBE, Patience
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


def adaptive(fake: FakeModel, adaptive_wait: bool = True) -> Batcher:
    config = ExecutorConfig(
        name="test", threads=1, initializer=lambda: None, max_batch_size=8, max_delay=DELAY,
        adaptive_wait=adaptive_wait, call_seconds=lambda rows: 0.001,
    )  # fmt: skip
    return Batcher(fake_pipeline(fake.run), config)


def one_at_a_time(batcher: Batcher, count: int) -> list[float]:
    """Seconds of each of ``count`` requests sent one after another, as one connection does."""

    async def serially() -> list[float]:
        seconds = []
        for i in range(count):
            started = time.perf_counter()
            await submit(batcher, np.full((1, 3), i).tolist())
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


def test_company_found_makes_it_wait_again():
    fake = FakeModel()
    batcher = adaptive(fake)

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
    assert fake.calls[-1] == (2, 3)  # the probe waited, and the second request joined it
    assert batcher._patience.fruitless < GIVE_UP  # patient again (its last wait, for a third, found nobody)
    assert batcher._patience.every == FIRST_PROBE
