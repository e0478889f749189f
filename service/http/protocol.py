"""uvicorn's httptools protocol with the limits a server facing the open internet needs.

uvicorn closes a connection only when it idles between requests (``timeout_keep_alive``): a
client that connects and never sends, or sends headers a byte at a time (slowloris), or
stops halfway through a body, keeps its connection, its memory and, once its headers are in,
a task forever. Here:

- a request's headers must arrive within ``read_timeout`` of its first byte (or of the
  connection, for the first request), else the client gets a 408 and the connection closes;
- while a body is being read, no gap between two reads may exceed ``read_timeout``, else the
  connection closes (the route sees the client leave: counted 499, not a server error);
- beyond ``max_connections`` open connections, a new one gets a 503 with ``Retry-After`` and
  is closed at once, before anything of it is parsed;
- a request the HTTP parser rejects (a malformed ``Content-Length``, a broken request line)
  gets its 400 as JSON, like every other error, not uvicorn's plain text;
- a hot route's request whose client closes the connection before its answer is cancelled
  (uvicorn only tells an app that calls ``receive()`` again): one still queued for the engine is
  dropped, not run for nobody (counted 499 and in ``inferpool_abandoned_requests_total``). A
  client that gave up, or a load generator's abandoned warm-up, would otherwise hold the cores
  for every request it left behind.

And three things for speed: plain ``/predict`` and v2 infer requests skip ASGI
(service/http/lane.py), an answer's head and body leave in one write (``OneWriteTransport``), and
each connection keeps one timer for its read timeout and one for its keep-alive timeout instead
of making and cancelling timers per request.
uvicorn writes the head at ``http.response.start`` and the body at ``http.response.body``: two
send() calls and two TCP segments per answer, and a client woken twice. On the digits model the
head's write alone was 19 % of a serving process's samples (py-spy under wrk, 8 connections).

This subclasses uvicorn's protocol and reads its non-public names (as service/http/lane.py and
service/processes/spread.py do): pyproject.toml pins uvicorn to the minor version tested, and
tests/unit/service/test_uvicorn_pin.py lists what is read and fails on any other version.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from inferpool.service.apierror import closing_error

if TYPE_CHECKING:  # imported by the CLI before the metrics' directory is set: nothing that imports them
    from inferpool.service.http.lane import Lane, LaneRequest

# A body up to this size is joined to the head it follows (one copy, one write); a larger one goes
# out by writelines, without the copy.
JOIN_BYTES = 64 * 1024


ONE_WRITE = "inferpool.one_write"
"""Scope key: the request's ``OneWriteTransport``, for a route that sends its whole answer at once."""
ANSWERING = "inferpool.answering"
"""Scope key: the task answering a hot route's request (service/http/rawasgi.py), cancelled if its
client leaves first. Only those routes set it: a model load must not stop halfway because its
caller left."""
CLIENT_LEFT = "inferpool.client_left"
"""Scope key, set just before that cancel: the route ends quietly and the request counts 499."""


def abandon(scope: dict[str, Any]) -> None:
    """Cancel the task answering ``scope``'s request, if it is a hot route's and still running."""
    task: asyncio.Task[None] | None = scope.get(ANSWERING)
    if task is not None and not task.done():
        scope[CLIENT_LEFT] = True
        task.cancel()


class OneWriteTransport:
    """What a request's cycle writes through. After ``hold()``, the next write (an answer's head) is
    kept until the one after it (its body) joins it: for a route that sends both in one go, as
    the hot routes do. The route's ``finally`` calls ``flush``, which sends what is held if the body
    never came, so nothing stays held past its two sends (which do not wait on the loop in between:
    only paused writes would, and a held head wrote nothing that could pause them). Without
    ``hold``, writes go straight through (a streamed answer's head is not held back), and nothing is
    scheduled on the event loop per request: a call_soon would cost an extra turn of the loop at one
    connection. ``close`` sends what is held first. Everything else is the connection's own transport."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.holding = False
        self.held: bytes | None = None

    def hold(self) -> None:
        self.holding = True

    def write(self, data: bytes) -> None:
        held = self.held
        if held is None:
            if self.holding:
                self.held = data
            else:
                self.transport.write(data)
            return
        self.held = None
        self.holding = False
        if len(data) <= JOIN_BYTES:
            self.transport.write(held + data)
        else:
            self.transport.writelines((held, data))

    def flush(self) -> None:
        self.holding = False
        held = self.held
        if held is not None:
            self.held = None
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def guarded_protocol(read_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    timed_out = closing_error(HTTPStatus.REQUEST_TIMEOUT, f"the request did not arrive within {read_timeout:g}s")
    full = closing_error(
        HTTPStatus.SERVICE_UNAVAILABLE, f"over {max_connections} open connections; retry later", retry_after=True
    )
    malformed = closing_error(
        HTTPStatus.BAD_REQUEST,
        "malformed HTTP request: the request line or a header (such as Content-Length: ASCII digits only) "
        "could not be parsed",
    )

    class GuardedHttpTools(HttpToolsProtocol):
        # One timer per connection, not one per request: ``_due`` is when the request being read
        # must be in (None: none is), and a timer that fires early sets itself again for the rest.
        # Keep-alive requests, each well within the timeout, then reuse the one timer instead of
        # making and cancelling one a request (two per request were on every request's path).
        _deadline: asyncio.TimerHandle | None = None
        _due: float | None = None
        _headers_in = False
        _one_write: OneWriteTransport | None = None
        _lane: Lane | None = None
        _filling: LaneRequest | None = None  # the lane's request whose body is being read, if one is
        # The lane's request whose aligned body the socket's reads go straight into, past the parser
        # (LaneBody.fill_directly): once its head and the start of its body are parsed.
        _direct: LaneRequest | None = None
        # The keep-alive timeout the same way: uvicorn makes a timer at every answer and cancels it
        # at the next request's first bytes (a TimerHandle made and cancelled per request); here one
        # timer per connection, ``_idle_due`` when the connection idled too long (None: it is busy).
        _idle: asyncio.TimerHandle | None = None
        _idle_due: float | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._lane = getattr(self.config.app, "lane", None)  # InferPoolApp's (service/http/fastpath.py)
            if len(self.connections) > max_connections:
                transport.write(full)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._direct = None
            self._disarm()
            self._idle_due = None
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            super().connection_lost(exc)
            cycle = self.cycle
            # uvicorn marks only a cycle whose answer is not complete; a lane request sees the same
            # mark in its own message_event (service/http/lane.py).
            if type(cycle) is RequestResponseCycle and cycle.disconnected:
                abandon(cycle.scope)  # type: ignore[arg-type]

        def data_received(self, data: bytes) -> None:
            self._idle_due = None  # busy again: the idle timer, if still set, lets the connection be
            if self._headers_in and self._due is not None:
                self._arm()  # a body is arriving: the gap starts again
            direct = self._direct
            if direct is not None:
                taken = direct.body.fill_directly(data)
                if direct.body.waiting():
                    return
                self._direct = None
                # The parser still counts down the body it never saw: the next request gets a new one.
                self.parser = httptools.HttpRequestParser(self)
                self.on_message_complete()
                if taken == len(data):
                    return
                data = memoryview(data)[taken:]  # type: ignore[assignment]  # pipelined behind it
            super().data_received(data)
            filling = self._filling
            if (
                filling is not None
                and filling.more_body
                and filling.body.waiting()
                and not filling.response_complete
                and not self.transport.is_closing()
            ):
                self._direct = filling

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._headers_in = False
            self._filling = None
            self._arm()

        def on_headers_complete(self) -> None:
            self._headers_in = True
            lane, before = self._lane, self.cycle
            if lane is not None and (before is None or before.response_complete):
                taken = lane.take(self)
                if taken is not None:
                    self.cycle = taken  # type: ignore[assignment]
                    self._filling = taken
                    return
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is None or cycle is before:  # an upgrade: no request cycle of its own
                return
            one_write = self._one_write
            if one_write is None:
                one_write = self._one_write = OneWriteTransport(self.transport)
            cycle.transport = one_write  # type: ignore[assignment]
            cycle.scope[ONE_WRITE] = one_write  # type: ignore[literal-required]

        def on_body(self, body: bytes) -> None:
            filling = self._filling
            if filling is None:
                super().on_body(body)
            elif not filling.response_complete:  # its client left: the rest goes nowhere
                # Read whole, without pausing: uvicorn's on_body pauses reading past 64 KiB until an
                # ASGI receive(), a wake-up and two system calls for each 64 KiB of a large body.
                filling.body.fill(body)

        def on_message_complete(self) -> None:
            self._due = None  # the request is in; uvicorn's keep-alive timer takes over after it
            super().on_message_complete()
            # uvicorn pauses reading while a body over 64 KiB waits for the app's receive(), and
            # resumes only at the next receive() or once the answer is out: a client that leaves
            # meanwhile would go unseen, its request run for nobody. With the body all in, what
            # can come next is its EOF or a pipelined request (which uvicorn queues and pauses on;
            # behind one already queued, reading stays paused until the answers go out).
            if not self.pipeline:
                self.flow.resume_reading()

        def on_response_complete(self) -> None:
            # uvicorn's, but for its keep-alive timer (see ``_idle``).
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self.flow.resume_reading()
            if self.pipeline:  # a pipelined request waits behind this answer: its turn now
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
                return
            due = self._idle_due = self.loop.time() + self.timeout_keep_alive
            if self._idle is None:
                self._idle = self.loop.call_at(due, self._idled)

        def _idled(self) -> None:
            due = self._idle_due
            if due is not None and self.loop.time() < due:  # busy and idle again since: wait for the rest
                self._idle = self.loop.call_at(due, self._idled)
                return
            self._idle = None
            if due is not None:
                self._idle_due = None
                self.timeout_keep_alive_handler()

        def send_400_response(self, msg: str) -> None:
            self._disarm()
            # uvicorn's parser error carries no detail worth more than naming where to look.
            self.transport.write(malformed)
            self.transport.close()

        def _arm(self) -> None:
            self._due = self.loop.time() + read_timeout
            if self._deadline is None:
                self._deadline = self.loop.call_at(self._due, self._fired)

        def _disarm(self) -> None:
            self._due = None
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _fired(self) -> None:
            due = self._due
            if due is not None and self.loop.time() < due:  # re-armed since: wait for the rest
                self._deadline = self.loop.call_at(due, self._fired)
                return
            self._deadline = None
            if due is not None:
                self._stalled()

        def _stalled(self) -> None:
            self._due = None
            if self.transport.is_closing():
                return
            if not self._headers_in:  # no route has this request yet: it can still be answered
                self.transport.write(timed_out)
            self.transport.close()

    return GuardedHttpTools
