"""A gRPC call's envelope (service/calls.py): counted by method and status code
(``inferpool_grpc_requests_total``), its trace and access log when an ``Observer`` is on, and
CANCELLED for a caller that went away.

The call is also the context its method gets (the servicer's methods take ``(request,
context)``, as grpcio's do): it passes grpc.aio's context methods through to the front end's own
(grpcio's, or the native one's ``native.Context``), and carries what the wrapper must know once
the method returns (its request id, its model call's phases).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from inferpool.engine.client import request_id
from inferpool.service.apierror import ApiError
from inferpool.service.asked import asked, asked_in_metadata
from inferpool.service.calls import Call
from inferpool.service.frontdoor import Activity, client_request_id
from inferpool.service.grpc.tensors import parameter_value
from inferpool.service.telemetry.metrics import Metrics
from inferpool.service.telemetry.observe import Observer

CANCELLED = "CANCELLED"


class RpcCall(Call[str]):
    __slots__ = ("context", "observer", "request", "response")
    LEFT = CANCELLED  # the caller went away or its deadline passed

    def __init__(
        self, activity: Activity, metrics: Metrics, started: float, name: str, request: Any, context: Any,
        observer: Observer | None,
    ) -> None:  # fmt: skip
        Call.__init__(self, activity, metrics, started, name)
        self.request = request
        self.context = context
        """The front end's own context for the call (grpc.aio's, or ``native.Context``)."""
        self.observer = observer
        self.response: Any = None

    def admit(self, level: int = 0) -> None:
        """``Call.admit`` at the level the request asks for (its ``priority`` parameter, else the
        x-request-priority metadata; a bad one counts as the default: the front door refuses it)."""
        priorities = self.activity.priorities
        if priorities.on and not level:
            parameters = getattr(self.request, "parameters", None)
            given = parameter_value(parameters["priority"]) if parameters and "priority" in parameters else None
            header = asked_in_metadata(self.invocation_metadata()).priority
            try:
                level = priorities.level(given, header)
            except ApiError:
                level = priorities.default
        Call.admit(self, level)

    def identify_caller(self, ids: Iterator[str]) -> str:
        """Its request id (the caller's metadata, the request's own ``id``, or the next of
        ``ids``), set for its logs and sent back as trailing metadata."""
        context = self.context
        metadata = context.invocation_metadata() or ()
        rid = self.rid = client_request_id(metadata) or self.request.id or next(ids)
        request_id.set(rid)
        asked.set(asked_in_metadata(metadata))  # what HTTP's Call.begin reads from headers
        context.set_trailing_metadata((("x-request-id", rid),))
        return rid

    # grpc.aio's context, as the methods use it.
    def invocation_metadata(self) -> Sequence[tuple[str, str | bytes]]:
        return self.context.invocation_metadata() or ()

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self.context.set_trailing_metadata(metadata)

    def time_remaining(self) -> float | None:
        return self.context.time_remaining()  # type: ignore[no-any-return]

    async def abort_with_status(self, status: grpc.Status) -> None:
        await self.context.abort_with_status(status)

    def _record(self, status: str, ended: float) -> None:
        inference = self.inference
        self.metrics.observe_rpc(self.label, status, ended - self.started, inference)
        observer = self.observer
        if observer is not None:
            metadata = self.context.invocation_metadata() or ()
            observer.rpc(self.label, status, metadata, self.started, ended, inference, self.request, self.response)
