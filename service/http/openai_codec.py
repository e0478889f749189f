"""OpenAI's embeddings API on the wire: a ``POST /v1/embeddings`` body in, its answer out, and
the model objects ``GET /v1/models`` lists.

Parsing checks what does not depend on the model (field names and types); what does (the
model's name, token-id support, ``dimensions`` up to the model's) is checked by ``for_model``
once the route has found the model. Every refusal is an ``ApiError`` naming the field at fault
(``param``), which the error boundary writes in the API's shape (service/apierror.py).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferpool.engine.client import Array, TextEmbedding, TextInputs, TokenIds
from inferpool.service.http.body_fields import bad, json_object
from inferpool.service.http.codec import encode_json
from inferpool.service.http.text_scores import check_prompt
from inferpool.service.v2.codec import whole_number

FIELDS = ("input", "model", "encoding_format", "dimensions", "user", "prompt_name")
ENCODINGS = ("float", "base64")
_INPUT_SHAPES = "a string, a list of strings, a list of token ids, or a list of lists of token ids"


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    inputs: list[str] | TextInputs | TokenIds
    """Texts (with a ``prompt_name``: TextInputs), or token-id lists: the payload the model's handler gets."""
    base64: bool = False
    dimensions: int | None = None
    """Truncate each embedding to this many values and re-normalise it (None: the model's own)."""


def parse_request(body: bytes | bytearray) -> EmbeddingsRequest:
    """The body as the API defines it; ``user`` is accepted and not used. A null optional field
    counts as absent (clients built on the API's own models send them so)."""
    payload = json_object(body, '{"model": "...", "input": "text"}')
    unknown = [name for name in payload if name not in FIELDS]
    if unknown:
        raise bad(f"unrecognized request argument {unknown[0]!r}; this route takes {', '.join(FIELDS)}", unknown[0])
    model = payload.get("model")
    if not isinstance(model, str):
        raise bad("'model' is required: the name of an embedding model GET /v1/models lists", "model")
    encoding = payload.get("encoding_format")
    if encoding is not None and encoding not in ENCODINGS:
        raise bad(f"'encoding_format' must be 'float' or 'base64'; got {encoding!r}", "encoding_format")
    dimensions = payload.get("dimensions")
    if dimensions is not None:
        dimensions = whole_number(dimensions)
        if dimensions is None or dimensions < 1:
            raise bad(f"'dimensions' must be a positive integer; got {payload['dimensions']!r}", "dimensions")
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        raise bad("'user' must be a string", "user")
    if "input" not in payload:
        raise bad(f"'input' is required: {_INPUT_SHAPES}", "input")
    return EmbeddingsRequest(model, _prompted(_inputs(payload["input"]), payload), encoding == "base64", dimensions)


def _prompted(inputs: list[str] | TokenIds, payload: Mapping[str, Any]) -> list[str] | TextInputs | TokenIds:
    """Texts with a named prompt go as TextInputs (this server's extension: the model's prompts)."""
    prompt = payload.get("prompt_name")
    if prompt is None:
        return inputs
    if not isinstance(prompt, str):
        raise bad("'prompt_name' must be a string: one of the model's prompts", "prompt_name")
    if isinstance(inputs, TokenIds):
        raise bad("'prompt_name' prefixes texts; token ids are sent whole, so leave it out", "prompt_name")
    return TextInputs(inputs, prompt_name=prompt)


def _inputs(value: object) -> list[str] | TokenIds:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise bad(f"'input' must be {_INPUT_SHAPES}, not empty", "input")
    if isinstance(value[0], str):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise bad(f"'input' item {index} is not a string; a list of texts holds only strings", "input")
        return value
    if isinstance(value[0], list):
        return TokenIds([_tokens(item, index) for index, item in enumerate(value)])
    return TokenIds([_tokens(value, None)])


def _tokens(value: object, index: int | None) -> list[int]:
    where = "'input'" if index is None else f"'input' item {index}"
    if not isinstance(value, list) or not value:
        raise bad(f"{where} must be a non-empty list of token ids (or 'input' {_INPUT_SHAPES})", "input")
    tokens = [whole_number(token) for token in value]
    if None in tokens:
        raise bad(f"{where} must hold only token ids, non-negative integers (or 'input' be {_INPUT_SHAPES})", "input")
    return tokens  # type: ignore[return-value]  # no None left


def for_model(request: EmbeddingsRequest, name: str, declared: TextEmbedding) -> None:
    """What the model decides: token ids only if its handler takes them, ``dimensions`` up to its
    own, a ``prompt_name`` among its prompts."""
    if isinstance(request.inputs, TextInputs):
        check_prompt(declared, request.inputs.prompt_name, name)
    if isinstance(request.inputs, TokenIds) and not declared.token_ids:
        raise bad(f"model {name!r} takes text only, not token ids; send 'input' as a string or a list of them", "input")
    if request.dimensions is not None and request.dimensions > declared.dimensions:
        raise bad(
            f"'dimensions' {request.dimensions} is more than model {name!r} has; ask for 1 to {declared.dimensions}",
            "dimensions",
        )


def encode_response(
    name: str, outputs: Mapping[str, Array], declared: TextEmbedding, request: EmbeddingsRequest
) -> bytes:
    """The API's answer: one embedding per input in order, floats or base64 of little-endian
    float32; with ``dimensions``, each vector's first values scaled back to unit length (what
    OpenAI's shortened embeddings are), and ``usage`` from the handler's token counts."""
    vectors = np.asarray(outputs[declared.embedding], dtype=np.float32)
    size = request.dimensions
    if size is not None and size < vectors.shape[1]:
        vectors = vectors[:, :size]
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), np.float32(1e-12))
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    if request.base64:
        rows = [b'"%s"' % base64.b64encode(row.tobytes()) for row in vectors]
    else:
        rows = [encode_json(row) for row in vectors]
    # Written around the rows rather than as one object for orjson: the floats are nearly all of
    # the cost, and each row once is what /predict's answer costs too.
    tokens = int(np.sum(outputs[declared.tokens]))
    data = b",".join(b'{"object":"embedding","index":%d,"embedding":%s}' % (i, row) for i, row in enumerate(rows))
    usage = b'{"prompt_tokens":%d,"total_tokens":%d}' % (tokens, tokens)
    return b'{"object":"list","data":[%s],"model":%s,"usage":%s}' % (data, encode_json(name), usage)


def model_object(name: str, created: int) -> dict[str, Any]:
    """A model as ``GET /v1/models`` lists it."""
    return {"id": name, "object": "model", "created": created, "owned_by": "inferpool"}
