"""What a hot route gives the HTTP lane (service/http/lane.py): its paths, how it resolves, decodes
and answers a request, and the decoded request the lane hands the front door."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from inferpool.service.frontdoor import Encoder, FrontDoor, Served
from inferpool.service.http.rawasgi import Answer

NAME = rb"([A-Za-z0-9._-]+)"


@dataclass(frozen=True, slots=True)
class Decoded:
    """A lane request's body as its route decoded it: what the front door's ``infer`` takes."""

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


class LaneHandler(Protocol):
    """What a hot route gives the lane (service/http/routes: ``Predict``, ``Infer``)."""

    door: FrontDoor

    def resolve(self, found: re.Match[bytes]) -> Served:
        """The model its matched path names (NotReady, or 404 for one not served)."""
        ...

    def decode(self, served: Served, request_body: bytearray | memoryview, headers: dict[bytes, bytes]) -> Decoded:
        """The whole body, decoded for ``served`` (a 4xx error for a bad one)."""
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
    an odd name goes the ASGI way), whose last group is optional, and the request metrics' label
    without and with that group, as the router names the route."""

    path: re.Pattern[bytes]
    labels: tuple[str, str]
    handler: LaneHandler


def lane_routes(predict: LaneHandler, infer: LaneHandler) -> list[LaneRoute]:
    """``/predict[/{name}]`` and v2 infer (service/http/routes: ``Predict``, ``Infer``)."""
    return [
        LaneRoute(re.compile(rb"/predict(?:/%s)?" % NAME), ("/predict", "/predict/{name}"), predict),
        LaneRoute(
            re.compile(rb"/v2/models/%s(?:/versions/%s)?/infer" % (NAME, NAME)),
            ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"),
            infer,
        ),
    ]
