"""One call through the front door, whichever way it came in: the envelope every adapter (the HTTP
lane, the ASGI middleware, the gRPC method wrapper, native gRPC's inline calls) fills in.

A ``Call`` owns, exactly once per call, the bookkeeping each way in used to write for itself:

- the door count (``Activity.active``), in both directions: counted in once (``enter``, or
  ``admit`` where the door's limit is checked at the same time), counted out once (``answered``,
  or at the latest ``finish``). No other code changes the count (``enter`` and ``answered`` are
  its only two writes), so a call can be neither counted out twice nor left counted in, whatever
  order its answer, its client's leaving and its task's end come in: the class of bug 6c18bf8 had
  to fix in four files at once;
- its request id (``identify``), set for its logs with its model labels cleared (``begin``);
- its start time, its metrics label (``label``), its status and its timings (``inference``);
- its metrics, access log and span (``finish``, through the way in's ``_record``);
- the status of a caller that left (``disconnected``): 499 over HTTP, CANCELLED over gRPC;
- whether its answer closes the connection for the drain or a retirement (``closes``).

An adapter only parses its wire, hands the front door a decoded request, and reports what it
answered (``finish(status)``). A subclass per way in says how a finished call is recorded: by
route and HTTP status (``HttpCall``) or by method and gRPC code (service/grpc/rpc_call.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Generic, TypeVar

from inferpool.engine.client import request_id
from inferpool.engine.errors import Overloaded
from inferpool.service.asked import NOTHING, Asked, asked
from inferpool.service.frontdoor import Activity, echoable_request_id, shed_message
from inferpool.service.telemetry.logs import model_served
from inferpool.service.telemetry.metrics import Inference, Metrics
from inferpool.service.telemetry.traffic import SHED

CLIENT_CLOSED = 499  # as nginx logs a request whose client left before it was answered
# Where a call stands at the door: each step is taken once, in this order (some skipped).
NEW, INSIDE, ANSWERED, FINISHED = range(4)
S = TypeVar("S", int, str)
"""A way in's status: HTTP's code, or a gRPC code's name."""


class Call(Generic[S]):
    """One call's bookkeeping; see the module's docstring. ``started`` is when it began
    (``time.perf_counter()``): the adapter passes the instant its wire's request began, so that
    its timing covers what it did before the call existed."""

    __slots__ = ("_door", "activity", "disconnected", "inference", "label", "metrics", "rid", "started")

    LEFT: S
    """The status a call whose caller left is counted under (each way in's class sets it)."""

    def __init__(self, activity: Activity, metrics: Metrics, started: float, label: str) -> None:
        self.activity = activity
        self.metrics = metrics
        self.started = started
        self.label = label
        """What its metrics count it under: an HTTP route's template (never the raw path: raw
        paths would be unbounded labels), a gRPC method's name."""
        self.rid = "-"
        self.inference: Inference | None = None
        """The model call's phases, once the front door has them (metrics, Server-Timing, logs)."""
        self.disconnected = False
        """Its caller left (the HTTP connection closed, the gRPC call was cancelled) before its
        answer was complete: it is counted under ``LEFT``, whatever status it was to have."""
        self._door = NEW

    def admit(self, level: int = 0) -> None:
        """Counted in at once, or Overloaded (counted as a load shed) when the door is full for
        its priority ``level`` (0: one level): for calls that arrive whole (gRPC's)."""
        limit = self.activity.full(level)
        if limit is not None:
            self.metrics.observe_error("load_shed")
            if level:
                self.metrics.traffic.prioritised(level, SHED)
            raise Overloaded(shed_message(limit))
        self.enter()

    def enter(self) -> None:
        """Counted in at the door (once; never after its answer)."""
        if self._door == NEW:
            self._door = INSIDE
            self.activity.active += 1

    def answered(self) -> None:
        """Its answer is complete: counted out now, not when its task ends (the client may
        already have sent its next request, and a task that has answered can still be waiting
        for the loop). Once only, however often it is called."""
        door = self._door
        if door < ANSWERED:
            self._door = ANSWERED
            if door == INSIDE:
                self.activity.active -= 1

    @property
    def was_answered(self) -> bool:
        return self._door >= ANSWERED

    @property
    def closes(self) -> bool:
        """The process is draining or retiring: its HTTP answer says ``Connection: close`` (a
        keep-alive client's next request then goes to a new connection, another replica, instead
        of meeting a socket this process closes under it); its gRPC answer waits for GOAWAY."""
        return self.activity.closing

    def identify(self, given: str | bytes | None, ids: Iterator[str]) -> str:
        """Its request id: the caller's own when fit to echo, else the next of ``ids``."""
        rid = self.rid = (None if given is None else echoable_request_id(given)) or next(ids)
        return rid

    def begin(self, what: Asked = NOTHING) -> None:
        """Its logs carry its request id from here on, and no model's labels until its model is
        found (the front door's ``resolve``, the host's ``get`` set them); the front door reads
        ``what`` its caller asked (service/asked.py)."""
        request_id.set(self.rid)
        model_served.set(None)
        asked.set(what)

    def finish(self, status: S) -> None:
        """It is over with ``status`` (``LEFT`` instead if its caller left): counted out if it
        still was in, and its metrics, log and span recorded. Once only: later calls do nothing."""
        if self._door == FINISHED:
            return
        self.answered()
        self._door = FINISHED
        self._record(self.LEFT if self.disconnected else status, time.perf_counter())

    def _record(self, status: S, ended: float) -> None:
        """Its metrics (and, where the way in has them, its access log and span)."""
        raise NotImplementedError


class HttpCall(Call[int]):
    """An HTTP request: its metrics by route template and status (``inferpool_requests_total``)."""

    __slots__ = ()
    LEFT = CLIENT_CLOSED

    def _record(self, status: int, ended: float) -> None:
        self.metrics.observe_request(self.label, status, ended - self.started, self.inference)
