"""Where a request's pipeline runs: one ``Executor`` protocol, picked by name from ``EXECUTORS``.

- ``inline``: on the event loop itself. No hand-off at all: the fastest for calls shorter than
  a hand-off or that hold the GIL anyway, but every call stalls all other requests meanwhile.
- ``threads``: on long-lived worker threads; one ``SimpleQueue.put`` in (a C call that wakes
  exactly one sleeping worker) and one ``call_soon_threadsafe`` back. Their thread-local
  caches (OpenMP teams, allocator arenas) stay warm; a worker that dies is replaced.
- ``batch``: the batcher (inferpool.engine.executors.batching): worker threads that concatenate concurrent
  requests into one model call.

Every executor runs the same ``Pipeline`` and answers with its ``Prediction``: the queued ones
on a ``Work`` each, inline in one go without one (the protocol: inferpool.engine.executors.base;
worker threads: .threads).
"""

from __future__ import annotations

from collections.abc import Callable

from inferpool.engine.executors.base import Executor, ExecutorConfig
from inferpool.engine.executors.batching import Batcher
from inferpool.engine.executors.inline import InlineExecutor
from inferpool.engine.executors.threads import ThreadExecutor
from inferpool.engine.serving.pipeline import Pipeline

__all__ = ["EXECUTORS", "Executor", "ExecutorConfig"]

EXECUTORS: dict[str, Callable[[Pipeline, ExecutorConfig], Executor]] = {
    "inline": InlineExecutor,
    "threads": ThreadExecutor,
    "batch": Batcher,
}
