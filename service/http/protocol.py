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
  gets its 400 as JSON, like every other error, not uvicorn's plain text.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferpool.service.apierror import closing_error


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

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(full)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._headers_in and self._due is not None:
                self._arm()  # a body is arriving: the gap starts again
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._headers_in = False
            self._arm()

        def on_headers_complete(self) -> None:
            self._headers_in = True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._due = None  # the request is in; uvicorn's keep-alive timer takes over after it
            super().on_message_complete()

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
