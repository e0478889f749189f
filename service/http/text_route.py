"""A text route's raw ASGI handler (service/http/routes/text.py, routes/openai.py): decode its
API's body, pick the model, run the handler's request type (text_api) through the one front door,
encode the API's answer. What a text handler refuses is about the request's texts: a 400 naming
the route's field for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope

from inferpool.engine.client import EngineClient, request_id
from inferpool.engine.errors import InvalidInput
from inferpool.service.apierror import ApiError
from inferpool.service.frontdoor import FrontDoor, Served
from inferpool.service.http.codec import read_body
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
    """Decode, pick the model, run it through the front door, encode: one text route."""

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
        door, api = self.door, self.api
        body, headers, received = await self.body(scope, receive)
        request = api.parse(body)
        model, declared = self.choose(request, scope["path"])
        api.check(request, model.name, declared)
        rid = request_id.get()
        echoed = rid if api.answers_id else ""
        try:
            content, inference = await door.infer(
                door.of(model), api.payload(request), self._encode, (declared, request, echoed), received=received,
                parsed=time.perf_counter(), rid=rid, timeout=headers.get(TIMEOUT_HEADER),
            )  # fmt: skip
        except InvalidInput as exc:  # what a text handler refuses is always about the texts
            raise ApiError(400, str(exc), exc.reason, param=api.field) from None
        return content, JSON, [timed(scope, inference)]

    def _encode(self, served: Served, outputs: Mapping[str, Any], decoded: tuple[Any, Any, str]) -> bytes:
        declared, request, rid = decoded
        return self.api.encode(served.name, outputs, declared, request, rid)
