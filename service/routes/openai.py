"""OpenAI's embeddings API: ``POST /v1/embeddings``, ``GET /v1/models[/{model}]``, for every
model whose handler declares a text embedding (engine/handlers.py, ``TextEmbedding``).

Embeddings go through the same door, admission, deadlines, batching and metrics as /predict
(a raw ASGI handler: service/fastpath.py); errors on these routes are in the API's shape
(service/apierror.py), so that OpenAI's clients raise their own exception types.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope

from inferpool.engine import EngineClient, InvalidInput, TextEmbedding
from inferpool.engine.requests import request_id
from inferpool.service.apierror import ApiError
from inferpool.service.codec import json_response, read_body
from inferpool.service.deps import HostDep
from inferpool.service.fastpath import documentation_only
from inferpool.service.host import ModelHost
from inferpool.service.openai_codec import encode_response, for_model, model_object, parse_request
from inferpool.service.openai_spec import EMBEDDINGS_REQUEST, EMBEDDINGS_RESPONSES, MODEL_RESPONSES, MODELS_RESPONSES
from inferpool.service.rawasgi import JSON, Answer, RawRoute, request_headers
from inferpool.service.timing import TIMEOUT_HEADER, deadline, record

router = APIRouter(prefix="/v1", tags=["OpenAI embeddings"])
HEADERS = frozenset({b"content-length", b"content-encoding", TIMEOUT_HEADER})
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
        metrics = self.metrics
        headers = request_headers(scope, HEADERS)
        received = time.perf_counter()
        body = await read_body(
            receive, headers.get(b"content-length"), self.max_body_bytes, headers.get(b"content-encoding")
        )
        request = parse_request(body)
        model, declared = embedding_model(self.host, request.model)
        for_model(request, model.name, declared)
        parsed = time.perf_counter()
        when = deadline(headers.get(TIMEOUT_HEADER), self.timeout_ms, floor_ms=model.deadline_floor_ms)
        try:
            prediction = await model.infer(request.inputs, when, request_id.get())
        except InvalidInput as exc:  # what the handler refuses here is always in 'input'
            raise ApiError(400, str(exc), exc.reason, param="input") from None
        encoding = time.perf_counter()
        content = encode_response(model.name, prediction.outputs, declared, request)
        timing = record(
            scope, metrics, model.name, prediction,
            received=received, parsed=parsed, encoding=encoding, encoded=time.perf_counter(),
        )  # fmt: skip
        metrics.refresh(model)
        return content, JSON, [(b"server-timing", timing.encode())]
