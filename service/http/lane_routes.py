"""What a hot route gives the HTTP lane (service/http/lane.py): its paths, how it resolves, decodes
and answers a request, and the decoded request the lane hands the front door."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from inferpool.engine.errors import InvalidInput
from inferpool.service.apierror import ApiError
from inferpool.service.frontdoor import Encoder, FrontDoor, Served
from inferpool.service.http.rawasgi import Answer

NAME = rb"([A-Za-z0-9._-]+)"


@dataclass(slots=True)
class Decoded:
    """A lane request's body as its route decoded it: what the front door's ``infer`` takes. Not
    frozen: a frozen dataclass sets each field through ``object.__setattr__``, 1.7 µs a request
    against 0.3 for these nine fields."""

    served: Served
    """The model it names (by its path, or a text route's by its body)."""
    inputs: object
    encode: Encoder[Any, Any]
    decoded: object
    """What ``encode`` is given besides the outputs (the parsed v2 request; None for /predict)."""
    timeout: bytes | None
    """The X-Request-Timeout-Ms header."""
    timeout_ms: float | None = None
    """The v2 ``timeout`` parameter."""
    priority: object = None
    """The v2 ``priority`` parameter, as sent (the front door checks it)."""
    texts_field: str | None = None
    """The request field that holds a text route's texts: the model's refusal of its inputs
    (InvalidInput) then answers as a 400 naming it (``refused``); None: as the model refused it."""


def refused(exc: InvalidInput, field: str) -> ApiError:
    """A text handler's refusal: always about the request's texts, which ``field`` holds."""
    return ApiError(400, str(exc), exc.reason, param=field)


class LaneHandler(Protocol):
    """What a hot route gives the lane (service/http/routes: ``Predict``, ``Infer``; the text
    routes' ``TextRoute``)."""

    door: FrontDoor

    def decode(
        self, found: re.Match[bytes], request_body: bytearray | memoryview, headers: dict[bytes, bytes]
    ) -> Decoded:
        """The model its matched path (or its body) names and the whole body, decoded for it (a
        4xx error for a bad one; NotReady, or 404 for a model not served)."""
        ...

    def data_offset(self, headers: dict[bytes, bytes], length: int) -> int | None:
        """Where binary tensor data starts in a body of ``length`` bytes with these headers, if it
        has any: the lane reads such a body into a buffer that puts that byte on an aligned
        address (service/http/body_buffer.py), and ``decode`` gets a memoryview of it."""
        ...

    def answer_of(self, encoded: Any, timing: tuple[bytes, bytes]) -> Answer:
        """The 200 for what the route's encoder made, with its Server-Timing header."""
        ...


@dataclass(frozen=True, slots=True)
class LaneRoute:
    """A route the lane answers: its paths (safe characters only: anything quoted, with a query or
    an odd name goes the ASGI way), whose last group, if it has groups, is optional, and the request
    metrics' label without and with that group, as the router names the route."""

    path: re.Pattern[bytes]
    labels: tuple[str, str]
    handler: LaneHandler


MOST_PATHS = 256
"""Paths whose match a RouteTable keeps (a client sends a few: one per model and version)."""


class RouteTable:
    """The lane's routes in order, and the match of each path seen lately: one dict look-up for a
    path seen before instead of a regex per route (a match object is immutable, so one serves
    every request to its path)."""

    __slots__ = ("_matched", "routes")

    def __init__(self, routes: list[LaneRoute]) -> None:
        self.routes = routes
        self._matched: dict[bytes, tuple[LaneRoute, re.Match[bytes]]] = {}

    def match(self, path: bytes) -> tuple[LaneRoute, re.Match[bytes]] | None:
        """The first route whose pattern takes the whole ``path``, and its match; None for none."""
        matched = self._matched.get(path)
        if matched is not None:
            return matched
        for route in self.routes:
            found = route.path.fullmatch(path)
            if found is not None:
                if len(self._matched) >= MOST_PATHS:
                    self._matched.clear()  # a client sending ever new names: the table stays small
                matched = self._matched[path] = route, found
                return matched
        return None


def lane_routes(predict: LaneHandler, infer: LaneHandler, texts: Mapping[str, LaneHandler]) -> RouteTable:
    """``/predict[/{name}]``, v2 infer (service/http/routes: ``Predict``, ``Infer``) and the text
    routes that run a model, ``texts`` by path (each its own metrics label)."""
    exact = [LaneRoute(re.compile(re.escape(path.encode())), (path, path), handler) for path, handler in texts.items()]
    return RouteTable(
        [
            LaneRoute(re.compile(rb"/predict(?:/%s)?" % NAME), ("/predict", "/predict/{name}"), predict),
            LaneRoute(
                re.compile(rb"/v2/models/%s(?:/versions/%s)?/infer" % (NAME, NAME)),
                ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"),
                infer,
            ),
            *exact,  # after the two above: /predict's and v2's requests match as soon as before
        ]
    )
