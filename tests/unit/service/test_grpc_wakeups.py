"""threads_batch_scheduled: threads started inside take SCHED_BATCH; the caller gets its own back."""

from __future__ import annotations

import os
import threading

from inferpool.service.grpc.wakeups import threads_batch_scheduled


def test_threads_started_inside_are_batch_scheduled_and_the_caller_is_restored():
    seen: list[int] = []
    before = os.sched_getscheduler(0)
    with threads_batch_scheduled():
        started = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        started.start()
        started.join()
    after = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
    after.start()
    after.join()
    assert seen == [os.SCHED_BATCH, before]
    assert os.sched_getscheduler(0) == before
