"""A text route's raw ASGI handler (service/http/routes/text.py, routes/openai.py): decode its
API's body, pick the model, run the handler's request type (text_api) through the one front door,
encode the API's answer. What a text handler refuses is about the request's texts: a 400 naming
the route's field for them.

Each that runs a model is a lane route too (service/http/lane.py: ``text_lane``): a plain request
is answered from the HTTP parser's callbacks, and the requests for an inline model that one loop
wake-up completes share its call (service/inline_together.py), texts of a length bucket stacked
into one batch (inferpool.engine.serving.inline_group), as ``/predict``'s and v2's are.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from fastapi.routing import APIRoute, APIRouter
from starlette.types import Receive, Scope

from inferpool.engine.client import EngineClient, request_id
from inferpool.engine.errors import InvalidInput
from inferpool.service.frontdoor import FrontDoor, Served
from inferpool.service.http.codec import read_body
from inferpool.service.http.lane_routes import Decoded, refused
from inferpool.service.http.rawasgi import JSON, Answer, RawRoute, request_headers, timed
from inferpool.service.http.text_models import text_model
from inferpool.service.timing import TIMEOUT_HEADER

if TYPE_CHECKING:  # the host loads models (torch); a front end only asks it for them
    from inferpool.service.models.host import ModelHost


def _no_checks(request: Any, name: str, declared: Any) -> None:
    return None


@dataclass(frozen=True, slots=True)
class TextApi:
    """One text route's API: how its body decodes and its answer encodes."""

    kind: str
    """The model kind it serves (text_models.KINDS)."""
    field: str
    """The request field the handler's refusals are about (the texts)."""
    parse: Callable[[bytearray], Any]
    """The body -> the request (with ``model``, None when unnamed)."""
    payload: Callable[[Any], object]
    """The request -> what the handler's ``preprocess`` gets."""
    encode: Callable[[str, Mapping[str, Any], Any, Any, str], bytes]
    """(model name, outputs, declaration, request, request id) -> the answer's body."""
    check: Callable[[Any, str, Any], None] = _no_checks
    """(request, model name, declaration): what the model decides (its prompts, its limits)."""
    choose: Callable[[ModelHost, Any, str, str], tuple[EngineClient, Any]] | None = None
    """(host, request, kind, route) -> the model and its declaration; None: text_models' rule."""
    answers_id: bool = False
    """Whether the answer carries the request id (Infinity's ``id``): then the id is part of what
    the response cache keys the answer by (a repeat hits only with the same X-Request-Id, as a
    retry sends it); otherwise the encoder is given "" and repeats of the same texts hit."""


class TextRoute(RawRoute):
    """Decode, pick the model, run it through the front door, encode: one text route, answered
    the ASGI way (``answer``) or on the lane (``decode``, ``answer_of``), with the same bytes."""

    runs_model: ClassVar[bool] = True
    """Whether it calls a model, so that the lane answers it (``text_lane``)."""

    def __init__(self, door: FrontDoor, api: TextApi) -> None:
        super().__init__(door)
        self.api = api

    async def body(self, scope: Scope, receive: Receive) -> tuple[bytearray, dict[bytes, bytes], float]:
        headers = request_headers(scope)
        received = time.perf_counter()
        length, encoding = headers.get(b"content-length"), headers.get(b"content-encoding")
        return await read_body(receive, length, self.max_body_bytes, encoding), headers, received

    def choose(self, request: Any, route: str) -> tuple[EngineClient, Any]:
        api = self.api
        choose = api.choose
        if choose is not None:
            return choose(self.door.host, request, api.kind, route)
        return text_model(self.door.host, api.kind, request.model, route)

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        body, headers, received = await self.body(scope, receive)
        call = self.decoded(scope["path"], body, headers)
        try:
            content, inference = await self.door.infer(
                call.served, call.inputs, call.encode, call.decoded, received=received, parsed=time.perf_counter(),
                rid=request_id.get(), timeout=call.timeout,
            )  # fmt: skip
        except InvalidInput as exc:  # what a text handler refuses is always about the texts
            raise refused(exc, self.api.field) from None
        return content, JSON, [timed(scope, inference)]

    def decoded(self, path: str, body: bytearray, headers: dict[bytes, bytes]) -> Decoded:
        """The body decoded, for the model it names (or ``path``'s one of its kind), as the front door takes it."""
        api = self.api
        request = api.parse(body)
        model, declared = self.choose(request, path)
        api.check(request, model.name, declared)
        echoed = request_id.get() if api.answers_id else ""
        payload, timeout = api.payload(request), headers.get(TIMEOUT_HEADER)
        return Decoded(self.door.of(model), payload, self._encode, (declared, request, echoed), timeout,
                       texts_field=api.field)  # fmt: skip

    # The lane's (service/http/lane.py): a text route that runs a model is a lane route too, so that
    # the requests for an inline model one loop wake-up completes share its call (inline_together).
    def decode(
        self, found: re.Match[bytes], request_body: bytearray | memoryview, headers: dict[bytes, bytes]
    ) -> Decoded:
        """The lane's: the body (a bytearray: no data offset, below), decoded as ``answer`` decodes it."""
        return self.decoded(found.string.decode(), cast(bytearray, request_body), headers)

    def data_offset(self, headers: dict[bytes, bytes], length: int) -> None:
        """The lane's: JSON only, no binary data."""
        return None

    def answer_of(self, encoded: bytes, timing: tuple[bytes, bytes]) -> Answer:
        return encoded, JSON, [timing]

    def _encode(self, served: Served, outputs: Mapping[str, Any], decoded: tuple[Any, Any, str]) -> bytes:
        declared, request, rid = decoded
        return self.api.encode(served.name, outputs, declared, request, rid)


def text_lane(handlers: Mapping[Any, object], routers: list[APIRouter]) -> dict[str, TextRoute]:
    """The text routes the lane answers, by path: each of ``routers``' POST routes whose raw
    handler (``handlers``, by endpoint) is a text route that runs a model."""
    return {
        route.path: handler
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
        and isinstance(handler := handlers.get(route.endpoint), TextRoute)
        and handler.runs_model
    }
