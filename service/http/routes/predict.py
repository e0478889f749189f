"""POST /predict: tensors in, tensors out, for the served model.

Declared for OpenAPI and answered by ``Predict``, a raw ASGI handler (service/http/fastpath.py
says why and how)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any, cast

from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope

from inferpool.engine.client import request_id
from inferpool.service.errors import documented_error
from inferpool.service.frontdoor import Served
from inferpool.service.http.codec import decode_inputs, encode_json, read_body
from inferpool.service.http.fastpath import documentation_only
from inferpool.service.http.lane_routes import Decoded
from inferpool.service.http.openapi import PREDICT_REQUEST, PREDICT_RESPONSES
from inferpool.service.http.rawasgi import JSON, Answer, RawRoute, request_headers, timed
from inferpool.service.timing import TIMEOUT_HEADER

router = APIRouter()


@router.post(
    "/predict",
    summary="Run the model on one sample or a batch",
    openapi_extra={"requestBody": PREDICT_REQUEST},
    responses=PREDICT_RESPONSES,
)
async def predict(request: Request) -> Response:
    """Send `{"inputs": x}` where `x` is one sample or a batch (leading batch dimension) for
    a single-input model, or an object keyed by input name. One sample in gives one sample
    out; a batch in gives the batch out. The model runs inline or on a worker thread, whichever
    the server measured faster for it at startup. The `Server-Timing` header gives each phase in
    milliseconds."""
    documentation_only()


@router.post(
    "/predict/{name}",
    summary="Run a named model on one sample or a batch",
    openapi_extra={"requestBody": PREDICT_REQUEST},
    responses=PREDICT_RESPONSES | {404: documented_error("No model of that name is served.")},
)
async def predict_named(request: Request, name: str) -> Response:
    """As `/predict`, for one of the models listed in the config's `[[models]]`."""
    documentation_only()


class Predict(RawRoute):
    """The raw ASGI handler of both routes (the model by the ``name`` path parameter)."""

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        door = self.door
        served = door.resolve(scope["path_params"].get("name"))
        headers = request_headers(scope)
        received = time.perf_counter()
        request_body = await read_body(
            receive, headers.get(b"content-length"), self.max_body_bytes, headers.get(b"content-encoding")
        )
        inputs = decode_inputs(request_body)
        body, inference = await door.infer(
            served, inputs, _encode, None, received=received, parsed=time.perf_counter(), rid=request_id.get(),
            timeout=headers.get(TIMEOUT_HEADER),
        )  # fmt: skip
        return body, JSON, [timed(scope, inference)]

    def decode(
        self, found: re.Match[bytes], request_body: bytearray | memoryview, headers: dict[bytes, bytes]
    ) -> Decoded:
        """The lane's (service/http/lane.py): the model its path names, and the body decoded as
        ``answer`` decodes it."""
        name = found.group(1)
        served = self.door.resolve(None if name is None else name.decode())
        # No data offset (below): the lane reads this route's bodies into a bytearray.
        body = cast(bytearray, request_body)
        return Decoded(served, decode_inputs(body), _encode, None, headers.get(TIMEOUT_HEADER))

    def data_offset(self, headers: dict[bytes, bytes], length: int) -> None:
        """The lane's: JSON only, no binary data."""
        return None

    def answer_of(self, encoded: bytes, timing: tuple[bytes, bytes]) -> Answer:
        return encoded, JSON, [timing]


def _encode(served: Served, outputs: Mapping[str, Any], _: None) -> bytes:
    return encode_json({"model": served.name, "outputs": outputs})
