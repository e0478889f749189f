"""A request's context as it travels through the engine, and its answer.

The same ``Work`` object carries a request on every queued path (worker threads, batcher):
its payload until validated, then its arrays; its id (for logs), deadline and timings; and the
future its caller awaits. The inline path needs none (``Pipeline.inline``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferpool.engine.schema import Array

if TYPE_CHECKING:
    from inferpool.engine.serving.call_stop import CallStop

request_id: ContextVar[str] = ContextVar("request_id", default="-")
"""The id of the request the current code works for, for log lines (front ends set it; the
engine sets it on its own threads from ``Work.request_id`` before it logs for a request)."""


@dataclass(slots=True)
class Prediction:
    """A request's answer and where its time went (the service turns these into metrics).
    Read-only by contract; not frozen, since a frozen dataclass's ``__init__`` costs three
    times a plain one's (1.6 against 0.5 µs, once per request: docs/BENCHMARKS.md, issue 35)."""

    outputs: dict[str, Array]
    single: bool
    """The request was one sample without a batch dimension; so are ``outputs``."""
    batch_size: int
    """Samples in the model call this request rode in (its own and any batched with it)."""
    queue_seconds: float
    """From submission until an executor picked the request up."""
    validate_seconds: float
    """Pre-processing, then checking the inputs against the schema and converting them to arrays."""
    compute_seconds: float
    """Borrowing a runtime and running the model (with batching: also concatenating and slicing)."""
    batch_seconds: float = 0.0
    """Waiting for the batch to form, after validation (0 when batching is off)."""
    dispatched: float = 0.0
    """``time.monotonic()`` when the model call began: the same for every request of a batch,
    which is how traces tell the requests of one batch (service/telemetry/tracing.py)."""


Coerce = Callable[[object], tuple[dict[str, Array], bool]]
"""Payload -> (arrays with a batch dimension, whether it was one sample without one)."""
Run = Callable[[Mapping[str, Array]], dict[str, Array]]
Prepare = Callable[[object], tuple[object, object]]
"""A model handler's preprocess, before ``coerce``: payload -> (model inputs, context)."""
Finish = Callable[[dict[str, Array], object], dict[str, Array]]
"""A model handler's postprocess, on one request's rows: (outputs, context) -> outputs."""
Outcome = Prediction | BaseException


class Work:
    """One request inside the engine, from ``infer`` to its answer."""

    __slots__ = (
        "arrays",
        "context",
        "deadline",
        "dequeued",
        "estimate",
        "future",
        "inputs",
        "level",
        "loop",
        "queued",
        "request_id",
        "rows",
        "single",
        "stop",
        "validate",
    )

    def __init__(
        self, inputs: object, estimate: int, deadline: float | None, request_id: str | None = None, level: int = 0
    ) -> None:
        self.inputs = inputs
        self.level = level
        """Its priority, 1 the highest (0: none named; inferpool.engine.serving.priorities)."""
        self.estimate = estimate  # the sample count admission counted in; given back as is
        self.deadline = deadline
        self.request_id = request_id or "-"
        self.queued = time.monotonic()
        self.dequeued = 0.0
        self.arrays: dict[str, Array] = {}
        self.context: object = None
        self.single = False
        self.rows = 0
        self.validate = 0.0
        # Set by executors that answer from another thread.
        self.future: asyncio.Future[Prediction] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: CallStop | None = None
        """The running call's stop switch, while a stoppable call runs it (inferpool.engine.serving.call_stop)."""

    def attach(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Prediction]:
        """A future on ``loop`` for an answer that will come from another thread."""
        self.loop = loop
        self.future = loop.create_future()
        return self.future

    def left(self) -> None:
        """Its caller stopped waiting (on the event loop): the call running it stops if it can and
        nobody else waits for it."""
        stop = self.stop
        if stop is not None:
            stop.pull()


def answer(outcome: Outcome) -> Prediction:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def deliver(items: Iterable[tuple[Work, Outcome]]) -> None:
    """Answer requests from a worker thread: one loop callback per event loop, not per request."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Work, Outcome]]] = {}
    for work, outcome in items:
        if work.loop is not None:
            by_loop.setdefault(work.loop, []).append((work, outcome))
    for loop, settled in by_loop.items():
        with suppress(RuntimeError):  # the loop closed while we ran: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(items: list[tuple[Work, Outcome]]) -> None:
    for work, outcome in items:
        future = work.future
        if future is None or future.done():  # the caller stopped waiting (deadline, client gone)
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
