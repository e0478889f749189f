"""Threads that should not preempt the event loop when they wake (the native gRPC server's).

Under the default policy, a thread woken by a call arriving or an answer to send preempts the
event loop thread on a shared core, mid-batch: one context switch a call, and the caches the
model warmed are refilled after each. Under ``SCHED_BATCH`` the woken thread waits for the loop
to go idle and then takes all that piled up (docs/BENCHMARKS.md, "Seventeenth session": +29 %
calls/s at 8 gRPC callers).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def threads_batch_scheduled() -> Iterator[None]:
    """Threads started inside run under SCHED_BATCH (no preempting on a wake-up): a new thread
    takes its policy from the thread that starts it, and the tokio threads are started in Rust,
    where no Python can reach them first. The calling thread's own policy is restored after."""
    policy = getattr(os, "SCHED_BATCH", None)
    before: tuple[int, os.sched_param] | None = None
    if policy is not None:  # Linux
        try:
            before = os.sched_getscheduler(0), os.sched_getparam(0)
            os.sched_setscheduler(0, policy, os.sched_param(0))
        except OSError as exc:  # a seccomp profile may forbid it: only speed is lost
            log.debug("cannot start the gRPC threads under SCHED_BATCH: %s", exc)
            before = None
    try:
        yield
    finally:
        if before is not None:
            try:
                os.sched_setscheduler(0, *before)
            except OSError as exc:  # never fatal: the loop keeps running, only its policy is off
                log.warning("cannot restore the event loop thread's scheduling policy: %s", exc)
