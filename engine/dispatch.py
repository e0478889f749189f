"""Where a request's inference runs, picked by ``RuntimeOptions.dispatch``.

- ``threads``: on a long-lived worker thread (``WorkerThreads``); the event loop stays free.
- ``inline``: on the event loop itself. No hand-off at all, so the fastest for models that
  run in less time than a hand-off costs, but every call stalls all other requests.
- ``auto``: ``inline`` when a warm batch-1 call is under ``inline_below_us``, else ``threads``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

R = TypeVar("R")


class Dispatch(Protocol):
    async def run(self, fn: Callable[[], R]) -> R: ...

    def close(self) -> None: ...


class InlineDispatch:
    async def run(self, fn: Callable[[], R]) -> R:
        return fn()

    def close(self) -> None:
        pass


DISPATCH_MODES = ("threads", "inline", "auto")
