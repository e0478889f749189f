"""Where a request's pipeline runs: one ``Executor`` protocol, picked by name from ``EXECUTORS``.

- ``inline``: on the event loop itself. No hand-off at all: the fastest for calls shorter than
  a hand-off or that hold the GIL anyway, but every call stalls all other requests meanwhile.
- ``threads``: on long-lived worker threads; one ``SimpleQueue.put`` in (a C call that wakes
  exactly one sleeping worker) and one ``call_soon_threadsafe`` back. Their thread-local
  caches (OpenMP teams, allocator arenas) stay warm; a worker that dies is replaced.
- ``batch``: the batcher (inferpool.engine.batching): worker threads that concatenate concurrent
  requests into one model call.

Every executor runs the same ``Pipeline`` on a ``Work`` and answers with its ``Prediction``
(the protocol: inferpool.engine.executor).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from inferpool.engine.batching import Batcher
from inferpool.engine.executor import Executor, ExecutorConfig
from inferpool.engine.pipeline import Pipeline
from inferpool.engine.requests import Prediction, Work, answer, deliver
from inferpool.engine.workers import QueuedWorkers


class InlineExecutor:
    count = alive = replaced = 0

    def __init__(self, pipeline: Pipeline, config: ExecutorConfig | None = None) -> None:
        self.pipeline = pipeline

    async def run(self, work: Work) -> Prediction:
        outcome, died = self.pipeline.one(work)
        if isinstance(died, KeyboardInterrupt | asyncio.CancelledError):
            raise died
        # Any other BaseException from the model arrives as WorkerDied: on the event loop a
        # model's SystemExit would otherwise stop the whole server.
        return answer(outcome)

    def close(self) -> None:
        pass


class ThreadExecutor(QueuedWorkers):
    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            outcome, died = self.pipeline.one(work)
            deliver([(work, outcome)])
            if died is not None:
                raise died  # this thread ends; ThreadSet starts its replacement


EXECUTORS: dict[str, Callable[[Pipeline, ExecutorConfig], Executor]] = {
    "inline": InlineExecutor,
    "threads": ThreadExecutor,
    "batch": Batcher,
}
DISPATCH_MODES = ("threads", "inline", "auto")
"""What ``RuntimeOptions.dispatch`` may say (``batch`` follows from ``max_batch_size`` > 1)."""
