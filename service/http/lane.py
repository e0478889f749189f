"""``POST /predict[/{name}]``, v2 infer and the text routes that run a model (``/v1/embeddings``,
TEI's ``/embed`` and ``/rerank``, ``/v1/rerank``, ``/v2/rerank``, ``/classify``, ``/v1/classify``)
answered from the HTTP parser's callbacks, without ASGI.

Under uvicorn every request pays for a scope, a ``RequestResponseCycle``, an ``asyncio.Event``, a
task, and the coroutines and message dicts of each middleware layer and of the route: on the
digits model, together more than the model itself (docs/BENCHMARKS.md). The lane takes a plain
request at its head (see ``Lane.take``) and answers it with the route's own code, front door
and error table. Requests for a model that runs inline are answered in one callback per loop
wake-up, all those whose bodies completed in it, in order (no task each; the phases stay as
under ASGI: every ready socket read, then every request run); any other model's on a task.
Everything else (other routes, chunked or compressed bodies, CORS, a wrong API key, a full door,
telemetry on) goes the ASGI way unchanged. Which way answered is invisible to the client: the
same status, body and headers (tests/integration/service/test_lane.py compares them), and the
same bookkeeping: each request is its own ``Call`` (service/calls.py), counted in and out of the
door, identified and recorded there as an ASGI request is.

The request stands in for uvicorn's cycle on its connection (``LaneRequest`` has the cycle's
fields uvicorn and this package read), so keep-alive, pipelining behind it, the graceful
shutdown, the slow-client guard and the connection spread's shedding all work as they do for
an ASGI request.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from inferpool.engine.client import request_id
from inferpool.engine.errors import InvalidInput
from inferpool.service.asked import PRIORITY_HEADER, asked_in
from inferpool.service.auth import ApiKey
from inferpool.service.calls import CLIENT_CLOSED, HttpCall
from inferpool.service.errors import ErrorAnswer, answer_for, unexpected
from inferpool.service.frontdoor import Activity, Looked, Served, request_ids
from inferpool.service.http.body_buffer import SMALLEST, BodyBuffers, LaneBody
from inferpool.service.http.codec import Disconnected
from inferpool.service.http.lane_routes import Decoded, LaneRoute, RouteTable, refused
from inferpool.service.http.middleware import SERIAL
from inferpool.service.http.rawasgi import JSON, Answer, error_headers, server_timing
from inferpool.service.inline_together import Answered, Together
from inferpool.service.telemetry.metrics import Inference, Metrics

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)
EAGER_CONNECTIONS = 2
"""A process holding at most this many connections answers a request as soon as its body is in."""


class LaneRequest(HttpCall):
    """One request on the lane, in its connection's ``cycle`` slot: uvicorn's parser callbacks
    fill ``body`` and signal ``message_event`` (this object) as they fill a cycle's, and set
    ``disconnected`` when its client leaves. Its own call (service/calls.py): one object a
    request, as before the envelope."""

    __slots__ = (
        "body", "found", "handler", "headers", "keep_alive", "lane", "more_body", "protocol", "queued",
        "response_complete", "task",
    )  # fmt: skip

    def __init__(
        self, lane: Lane, protocol: HttpToolsProtocol, route: LaneRoute, found: re.Match[bytes],
        headers: dict[bytes, bytes], keep_alive: bool, length: int,
    ) -> None:  # fmt: skip
        label = route.labels[found.group(found.re.groups) is not None]
        HttpCall.__init__(self, lane.activity, lane.metrics, time.perf_counter(), label)
        self.lane = lane
        self.protocol = protocol
        self.handler = route.handler
        self.found = found
        self.headers = headers
        self.keep_alive = keep_alive
        offset = None if length < SMALLEST else route.handler.data_offset(headers, length)
        self.body = LaneBody.of(lane.buffers, length, offset)
        self.more_body = True
        self.response_complete = False
        self.queued = False
        self.task: asyncio.Task[None] | None = None
        """What answers it, for a model on worker threads: cancelled if its client leaves first."""
        self.identify(headers.get(b"x-request-id"), lane.ids)

    @property
    def message_event(self) -> LaneRequest:
        """Itself, read and not held: a slot holding ``self`` made every request a reference cycle,
        freed only by the garbage collector (a pass every ~140 requests, each pass ms long now and
        then) instead of at once when its connection's next request replaces it."""
        return self

    def set(self) -> None:
        """uvicorn's signal: more body came, the body is complete, or the client left."""
        if self.response_complete:
            return
        if self.queued:
            task = self.task
            if self.disconnected and task is not None:
                task.cancel()  # nobody to answer: still queued for the engine, it is dropped unrun
            return
        if self.disconnected:  # before its body was all here: nobody to answer (never counted in)
            self.response_complete = True
            self.finish(CLIENT_CLOSED)
        elif not self.more_body:
            self.queued = True
            self.lane.enqueue(self)


class Lane:
    """Takes plain requests for its routes off the ASGI path, and answers them."""

    def __init__(
        self, routes: RouteTable, activity: Activity, metrics: Metrics, max_body_bytes: int,
        auth: ApiKey | None, cors: bool,
    ) -> None:  # fmt: skip
        self.routes = routes
        self.activity = activity
        self.metrics = metrics
        # A larger body goes the ASGI way, which answers its 413.
        self.max_body = max_body_bytes
        self.buffers = BodyBuffers()
        self.auth = auth
        self.cors = cors
        self.ids = request_ids(SERIAL)
        self.pending: list[LaneRequest] = []
        self.scheduled = False
        # The parser's callbacks run in the loop's own context: what a request sets (its id, its
        # model's labels) must not stay there for every task made after it.
        self._context = contextvars.Context()
        self._eager = False
        self._heads: dict[tuple[int, bytes], tuple[list[tuple[bytes, bytes]], bytes]] = {}

    def take(self, protocol: HttpToolsProtocol) -> LaneRequest | None:
        """The lane's request for the head just parsed, or None to leave it to ASGI."""
        parser = protocol.parser
        if parser.get_method() != b"POST" or protocol.root_path or parser.should_upgrade():
            return None
        url = protocol.url
        matched = self.routes.match(url)
        if matched is None:
            return None
        route, found = matched
        headers = dict(reversed(protocol.headers))
        length = headers.get(b"content-length")
        if length is None or not length.isdigit() or len(length) > 9 or int(length) > self.max_body:
            return None
        if b"content-encoding" in headers or b"transfer-encoding" in headers or b"expect" in headers:
            return None  # inflating, chunked reading, 100-continue: the ASGI path's
        if self.cors and b"origin" in headers:
            return None
        if self.auth is not None and not self.auth.admits(url.decode(), protocol.headers):
            return None  # answered 401 the ASGI way
        activity = self.activity
        if activity.full(activity.level_of(headers.get(PRIORITY_HEADER))) is not None:
            return None
        keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
        return LaneRequest(self, protocol, route, found, headers, keep_alive, int(length))

    def enqueue(self, request: LaneRequest) -> None:
        """Its body is all here: counted in at the door, answered at this wake-up's end."""
        request.enter()
        if not self.pending and not self._eager and len(request.protocol.connections) <= EAGER_CONNECTIONS:
            # Few clients: answered now, from the callback that completed its body (a loop step
            # less; +8 % req/s at one connection). Under load the wake-up's requests are answered
            # together once every ready socket is read, which measured faster (docs/BENCHMARKS.md).
            self._eager = True  # an answer that led here again (it cannot today) waits its turn instead
            try:
                self._context.run(self._answer, request)
            finally:
                self._eager = False
            return
        self.pending.append(request)
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        together = Together(pending[0].handler.door) if len(pending) > 1 else None
        for request in pending:
            try:
                self._answer(request, together)
            except Exception:  # noqa: BLE001 -- a bug here must not strand the requests after it (logged)
                self._failed([request])
        if together is not None:
            try:
                together.run()
            except Exception:  # noqa: BLE001 -- nor those held (logged)
                self._failed(pending)

    def _failed(self, requests: list[LaneRequest]) -> None:
        """Nor leave the door's count: each unanswered one a 500, its connection closed."""
        log.exception("answering a request on the lane failed")
        for request in requests:
            if len(requests) == 1 or not request.response_complete:
                request.protocol.transport.close()
            if not request.response_complete:
                self._done(request, 500, None)

    def _answer(self, request: LaneRequest, together: Together | None = None) -> None:
        if request.disconnected:
            self._done(request, CLIENT_CLOSED, None)
            return
        request.begin(asked_in(request.headers))
        handler = request.handler
        answered: Answered
        texts_field: str | None = None  # known once decoded
        try:
            call = handler.decode(request.found, request.body.data, request.headers)
            served, texts_field = call.served, call.texts_field
            door = handler.door
            if served.model.inline:
                # Several at once: held, then run together (one engine call a model) by _run.
                run: Callable[..., tuple[Any, Inference] | None] = door.infer_inline
                if together is not None:
                    then = functools.partial(self._reply, request, texts_field=texts_field)
                    run = functools.partial(together.hold, then=then)
                answered_now = run(
                    served, call.inputs, call.encode, call.decoded, received=request.started,
                    parsed=time.perf_counter(), rid=request.rid, timeout=call.timeout, timeout_ms=call.timeout_ms,
                    priority=call.priority,
                )  # fmt: skip
                if answered_now is None:
                    return
                answered = answered_now
            else:
                looked = door.look(served, call.inputs, call.encode, call.decoded, call.priority)
                if looked[2] is None:
                    self._later(request, served, call, looked)
                    return
                # A response cache hit: answered now, with no task.
                answered = looked[2], door.hit(served, request.started, time.perf_counter())
        except Exception as exc:  # noqa: BLE001 -- _reply answers it (unexpected() logs the traceback)
            # Answered here, not kept in a local: the traceback holds this frame, and a frame
            # holding its own exception is a cycle only the garbage collector frees.
            self._reply(request, exc, texts_field)
            return
        self._reply(request, answered, texts_field)

    def _reply(self, request: LaneRequest, answered: Answered, texts_field: str | None = None) -> None:
        """Send what the front door answered: its encoded answer and phases, or the error for it
        (a text route's model refusing its texts: the 400 naming ``texts_field``)."""
        request_id.set(request.rid)  # answered after others' requests (together.run): its logs are its own
        if isinstance(answered, InvalidInput) and texts_field is not None:
            answered = refused(answered, texts_field)
        if not isinstance(answered, Exception):
            try:
                encoded, inference = answered
                answer = request.handler.answer_of(encoded, server_timing(request.started, inference))
            except Exception as exc:  # noqa: BLE001 -- unexpected() logs the traceback
                answered = exc
            else:
                self._send(request, 200, answer, inference)
                return
        self._error(request, answered)

    def _later(self, request: LaneRequest, served: Served, call: Decoded, looked: Looked) -> None:
        """Its answer on a task (a model on worker threads): held in the server's task set, as
        uvicorn holds its own, so that its shutdown waits for them."""
        tasks = request.protocol.tasks
        task = request.task = asyncio.get_running_loop().create_task(self._answer_later(request, served, call, looked))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(functools.partial(self._ended, request))

    async def _answer_later(self, request: LaneRequest, served: Served, call: Decoded, looked: Looked) -> None:
        answered: Answered
        try:
            answered = await request.handler.door.infer(
                served, call.inputs, call.encode, call.decoded, received=request.started, parsed=time.perf_counter(),
                rid=request.rid, timeout=call.timeout, timeout_ms=call.timeout_ms, looked=looked,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 -- _reply answers it
            answered = exc
        self._reply(request, answered, call.texts_field)

    def _ended(self, request: LaneRequest, _: object) -> None:
        """Its task is over: finished if it never answered. Cancelled (its client left: 499, or a
        shutdown past its grace: 500), counted as the ASGI path counts it; a task cancelled before
        its first step never ran its own code, so this is the one place that sees every end."""
        if not request.response_complete:
            self._done(request, 500, None)

    def _error(self, request: LaneRequest, exc: Exception) -> None:
        if isinstance(exc, Disconnected):
            self._done(request, CLIENT_CLOSED, None)
            return
        path = request.found.string.decode()
        error: ErrorAnswer = answer_for(exc, self.metrics) or unexpected({"method": "POST", "path": path}, self.metrics)
        self._send(request, error.status, (error.body(path), JSON, error_headers(error)), None)

    def _send(self, request: LaneRequest, status: int, answer: Answer, inference: Inference | None) -> None:
        """The answer in one write, as uvicorn's cycle would have written it (its default headers
        first, then the route's, then the request id; ``connection: close`` when it closes)."""
        protocol = request.protocol
        transport = protocol.transport
        if request.disconnected or transport.is_closing():
            self._done(request, CLIENT_CLOSED, inference)
            return
        body, content_type, extra = answer
        head = [self._head(protocol.server_state.default_headers, status, content_type), b"%d\r\n" % len(body)]
        closes = not request.keep_alive or request.closes
        said = False  # whether the route's headers name the connection's fate (a 503 NotReady closes)
        for name, value in extra:
            if name == b"connection":
                said = True
                closes = closes or b"close" in value.lower()
            head += (name, b": ", value, b"\r\n")
        head += (b"x-request-id: ", request.rid.encode(), b"\r\n")
        if closes and not said:
            head.append(b"connection: close\r\n")
        head += (b"\r\n", body)
        transport.write(b"".join(head))
        request.keep_alive = not closes
        self._done(request, status, inference)
        if closes:
            transport.close()
        protocol.on_response_complete()

    def _head(self, defaults: list[tuple[bytes, bytes]], status: int, content_type: bytes) -> bytes:
        """An answer's head up to its content length's value: the status line, uvicorn's default
        headers and the content type, joined once per status and type for as long as uvicorn keeps
        the same defaults (it makes a new list when its date header moves on, once a second)."""
        found = self._heads.get((status, content_type))
        if found is None or found[0] is not defaults:
            head = [STATUS_LINE[status]]
            for name, value in defaults:
                head += (name, b": ", value, b"\r\n")
            head += (b"content-type: ", content_type, b"\r\ncontent-length: ")
            found = self._heads[status, content_type] = (defaults, b"".join(head))
        return found[1]

    def _done(self, request: LaneRequest, status: int, inference: Inference | None) -> None:
        """What it answered (499 instead, by its call, if its client left): counted out of the door,
        observed, and its place on the connection given up."""
        request.response_complete = True
        request.inference = inference
        request.finish(status)
        request.body.give_back(self.buffers)
