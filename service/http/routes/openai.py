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

from inferpool.engine.client import EngineClient, TextEmbedding
from inferpool.service.apierror import ApiError
from inferpool.service.http.codec import json_response
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
from inferpool.service.http.text_route import TextApi

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


def _embedding_model(host: ModelHost, request: EmbeddingsRequest, kind: str, route: str) -> tuple[EngineClient, Any]:
    return embedding_model(host, request.model)


def _encode(
    name: str, outputs: Mapping[str, Any], declared: TextEmbedding, request: EmbeddingsRequest, rid: str
) -> bytes:
    return encode_response(name, outputs, declared, request)


def _inputs(request: EmbeddingsRequest) -> object:
    return request.inputs


EMBEDDINGS = TextApi("embedding", "input", parse_request, _inputs, _encode, for_model, _embedding_model)
"""``POST /v1/embeddings`` as a text route: a model that embeds no text is a 404 here, as
OpenAI's API says of a model it does not have (service/http/text_route.py)."""
