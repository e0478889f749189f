"""Where a request's inference runs, picked by ``RuntimeOptions.dispatch``.

- ``threads``: on a long-lived worker thread (``WorkerThreads``); the event loop stays free.
- ``inline``: on the event loop itself. No hand-off at all, so the fastest for models that
  run in less time than a hand-off costs, but every call stalls all other requests.
- ``auto``: ``inline`` when a warm batch-1 call is under ``inline_below_us``, else ``threads``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, TypeVar

from engine.errors import WorkerDied

R = TypeVar("R")


class Dispatch(Protocol):
    async def run(self, fn: Callable[[], R]) -> R: ...

    def close(self) -> None: ...


class InlineDispatch:
    async def run(self, fn: Callable[[], R]) -> R:
        try:
            return fn()
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as exc:
            # On the event loop a model's SystemExit would stop the whole server: it fails the
            # request instead, as a dying worker thread does under the ``threads`` dispatch.
            if isinstance(exc, Exception):
                raise
            raise WorkerDied(f"the model raised {type(exc).__name__}; the request failed") from exc

    def close(self) -> None:
        pass


DISPATCH_MODES = ("threads", "inline", "auto")
