"""OpenAI's embeddings API: ``POST /v1/embeddings``, ``GET /v1/models[/{model}]``, for every
model whose handler declares a text embedding (engine/models/handlers.py, ``TextEmbedding``).

Embeddings go through the same door, admission, deadlines, batching and metrics as /predict
(a raw ASGI handler: service/http/fastpath.py); errors on these routes are in the API's shape
(service/apierror.py), so that OpenAI's clients raise their own exception types.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope

from inferpool.engine.client import EngineClient, TextEmbedding, request_id
from inferpool.engine.errors import InvalidInput
from inferpool.service.apierror import ApiError
from inferpool.service.frontdoor import Served
from inferpool.service.http.codec import json_response, read_body
from inferpool.service.http.deps import HostDep
from inferpool.service.http.fastpath import documentation_only
from inferpool.service.http.openai_codec import (
    EmbeddingsRequest,
    encode_response,
    for_model,
    model_object,
    parse_request,
)
from inferpool.service.http.openai_spec import (
    EMBEDDINGS_REQUEST,
    EMBEDDINGS_RESPONSES,
    MODEL_RESPONSES,
    MODELS_RESPONSES,
)
from inferpool.service.http.rawasgi import JSON, Answer, RawRoute, request_headers, timed
from inferpool.service.timing import TIMEOUT_HEADER

if TYPE_CHECKING:  # the host loads models (torch); a front end only asks it for them
    from inferpool.service.models.host import ModelHost

router = APIRouter(prefix="/v1", tags=["OpenAI embeddings"])
CREATED = int(time.time())
"""The models' ``created``: when the server started (in the supervisor, before it forks, so
every serving process says the same)."""


def embedding_models(host: ModelHost) -> list[EngineClient]:
    """The served models (each name's latest version) that embed text; 503 while not serving."""
    host.serving()
    return [model for model, _ in host.served() if _declared(model) is not None]


def embedding_model(host: ModelHost, name: str) -> tuple[EngineClient, TextEmbedding]:
    """The text-embedding model ``name``; 404 (model_not_found) for any other name, a model
    that is served but embeds no text included: this API does not serve it."""
    try:
        model: EngineClient | None = host.get(name)
    except ApiError:
        model = None
    declared = None if model is None else _declared(model)
    if model is None or declared is None:
        names = [m.name for m in embedding_models(host)]
        message = f"the model {name!r} does not exist here; the embedding models served are {names} (GET /v1/models)"
        raise ApiError(404, message, "unknown_model", param="model")
    return model, declared


def _declared(model: EngineClient) -> TextEmbedding | None:
    handler = model.info.handler
    return None if handler is None else handler.text_embedding


@router.post(
    "/embeddings",
    summary="Create embeddings, as OpenAI's API does",
    openapi_extra={"requestBody": EMBEDDINGS_REQUEST},
    responses=EMBEDDINGS_RESPONSES,
)
async def embeddings(request: Request) -> Response:
    """`input` a string, a list of strings, a list of token ids or a list of such lists (the
    model's own vocabulary ids, whole sequences as its tokenizer makes them); `model` one of
    GET /v1/models; `encoding_format` `float` (default) or `base64` (little-endian float32);
    `dimensions` keeps each embedding's first values, scaled back to unit length; `user` is
    accepted. `usage` counts the tokens embedded. Errors are OpenAI's error objects."""
    documentation_only()


@router.get("/models", summary="List the text-embedding models", responses=MODELS_RESPONSES)
async def models(host: HostDep) -> Response:
    return json_response({"object": "list", "data": [model_object(m.name, CREATED) for m in embedding_models(host)]})


@router.get("/models/{model}", summary="One text-embedding model", responses=MODEL_RESPONSES)
async def model(host: HostDep, model: str) -> Response:
    found, _ = embedding_model(host, model)
    return json_response(model_object(found.name, CREATED))


class Embeddings(RawRoute):
    """The raw ASGI handler of ``POST /v1/embeddings``."""

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        door = self.door
        headers = request_headers(scope)
        received = time.perf_counter()
        body = await read_body(
            receive, headers.get(b"content-length"), self.max_body_bytes, headers.get(b"content-encoding")
        )
        request = parse_request(body)
        model, declared = embedding_model(door.host, request.model)
        for_model(request, model.name, declared)
        try:
            content, inference = await door.infer(
                door.of(model), request.inputs, _encode, (declared, request), received=received,
                parsed=time.perf_counter(), rid=request_id.get(), timeout=headers.get(TIMEOUT_HEADER),
            )  # fmt: skip
        except InvalidInput as exc:  # what the handler refuses here is always in 'input'
            raise ApiError(400, str(exc), exc.reason, param="input") from None
        return content, JSON, [timed(scope, inference)]


def _encode(served: Served, outputs: Mapping[str, Any], decoded: tuple[TextEmbedding, EmbeddingsRequest]) -> bytes:
    declared, request = decoded
    return encode_response(served.name, outputs, declared, request)
