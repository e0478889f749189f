"""Stopping a model call that nobody waits for any more.

A request whose client leaves, or whose deadline passes, while the model runs it used to run to
its end: a 2 s call for a client that gave up after 1 s (and retried) held a runtime and a core
for nobody, and the retry queued behind it. Where a backend can stop a call between its
operators (onnxruntime's ``RunOptions.terminate``), the worker thread about to run a call makes
it a ``CallStop`` (``Pipeline.execute``); the backend arms it with a stop for that one call; the
event loop pulls it when a caller of the call stops waiting (``QueuedWorkers.run``), and the call
stops once all of its callers have. The backend then raises ``CallStopped``: the runtime is sound
(it is not replaced), nothing is logged as a model failure, the call's time does not feed
admission's estimate, and ``Pipeline.stopped`` counts it (``inferpool_stopped_calls_total``).

A backend that cannot stop a call (torch eager, OpenVINO's synchronous request) never arms it:
the call runs to its end, as before. The inline executor has no caller that can leave mid-call
(a call holds the event loop), so it makes none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferpool.engine.serving.requests import Work

_thread = threading.local()


class CallStop:
    """One model call's stop switch, shared by the requests riding in it."""

    __slots__ = ("_stop", "_works")

    def __init__(self, works: Sequence[Work]) -> None:
        self._works = works
        self._stop: Callable[[], object] | None = None

    def arm(self, stop: Callable[[], object]) -> None:
        """The backend's stop for the call it is about to run (on the thread that runs it). A
        caller that left between the request's last check and now is not missed: pulled at once."""
        self._stop = stop
        self.pull()

    def nobody_waits(self) -> bool:
        """Every caller of the call has stopped waiting (a request without a future never has)."""
        return all(work.future is not None and work.future.done() for work in self._works)

    def pull(self) -> None:
        """A caller stopped waiting: stop the call if it is armed and none of its callers waits."""
        stop = self._stop
        if stop is not None and self.nobody_waits():
            stop()  # idempotent: a stop for a call that already ended reaches nothing


def take() -> CallStop | None:
    """The stop of the call this thread is about to run (None: nothing can stop it), taken once:
    what the thread runs after it in the same step (a failed runtime's replacement warming up)
    is not that call and must not be stopped with it."""
    found: CallStop | None = getattr(_thread, "stop", None)
    _thread.stop = None
    return found


def running(stop: CallStop | None) -> None:
    """Set (or, with None, clear) the stop of the call this thread runs next."""
    _thread.stop = stop
