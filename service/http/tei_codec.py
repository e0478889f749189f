"""Text Embeddings Inference's routes on the wire: ``POST /embed``, ``/rerank`` and ``/tokenize``
bodies in, their answers out (TEI's own shapes: bare JSON arrays).

Beyond TEI's fields each takes ``model`` (which served model to use: service/http/text_models.py).
``truncate`` absent means truncate (TEI's ``--auto-truncate``); ``truncation_direction`` is
``Right`` only (a rerank pair cuts its text, never its query).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from inferpool.engine.client import Array, TextEmbedding, TextInputs, TextPairs, TextRerank, Token
from inferpool.service.http.body_fields import BodyFields, bad
from inferpool.service.http.codec import encode_json
from inferpool.service.http.text_scores import check_prompt, ranked

EMBED_FIELDS = ("inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "model")
RERANK_FIELDS = ("query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction", "model")
TOKENIZE_FIELDS = ("inputs", "add_special_tokens", "model")
DIRECTIONS = ("Right",)
"""TEI's ``truncation_direction``s served: the end of a text is cut (``Left`` is not)."""


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    model: str | None
    inputs: TextInputs


@dataclass(frozen=True, slots=True)
class RerankRequest:
    model: str | None
    pairs: TextPairs
    raw_scores: bool
    return_text: bool


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    model: str | None
    texts: list[str]
    add_special_tokens: bool


def _truncate(fields: BodyFields) -> bool:
    fields.choice("truncation_direction", DIRECTIONS)
    return fields.flag("truncate", True)


def parse_embed(body: bytes | bytearray) -> EmbedRequest:
    fields = BodyFields(body, EMBED_FIELDS, '{"inputs": "text"}')
    inputs = TextInputs(
        fields.texts("inputs", one=True), _truncate(fields), fields.name("prompt_name"), fields.flag("normalize", True)
    )
    return EmbedRequest(fields.name("model"), inputs)


def parse_rerank(body: bytes | bytearray) -> RerankRequest:
    fields = BodyFields(body, RERANK_FIELDS, '{"query": "text", "texts": ["text", "..."]}')
    pairs = TextPairs(fields.text("query"), fields.texts("texts", one=False), _truncate(fields))
    return RerankRequest(
        fields.name("model"), pairs, fields.flag("raw_scores", False), fields.flag("return_text", False)
    )


def parse_tokenize(body: bytes | bytearray) -> TokenizeRequest:
    fields = BodyFields(body, TOKENIZE_FIELDS, '{"inputs": "text"}')
    return TokenizeRequest(
        fields.name("model"), fields.texts("inputs", one=True), fields.flag("add_special_tokens", True)
    )


def embed_for_model(request: EmbedRequest, name: str, declared: TextEmbedding) -> None:
    """What the model decides: its prompts, and whether it has embeddings before normalisation."""
    check_prompt(declared, request.inputs.prompt_name, name)
    if not request.inputs.normalize and declared.unnormalized is None:
        raise bad(
            f"model {name!r} gives unit-length embeddings only; send 'normalize': true or leave it out", "normalize"
        )


def encode_embed(
    model: str, outputs: Mapping[str, Array], declared: TextEmbedding, request: EmbedRequest, rid: str
) -> bytes:
    """One list of floats per input, in order (a list of one for a single string, as TEI answers)."""
    name = declared.embedding if request.inputs.normalize else declared.unnormalized
    assert name is not None, "embed_for_model refused normalize: false without it"
    return encode_json(np.ascontiguousarray(outputs[name], dtype=np.float32))


def encode_rerank(
    model: str, outputs: Mapping[str, Array], declared: TextRerank, request: RerankRequest, rid: str
) -> bytes:
    """``[{index, score, text?}]`` best first."""
    texts = request.pairs.texts
    answer = [
        {"index": index, "score": score, "text": texts[index]}
        if request.return_text
        else {"index": index, "score": score}
        for index, score in ranked(outputs[declared.score], request.raw_scores)
    ]
    return encode_json(answer)


def encode_tokens(tokens: list[list[Token]]) -> bytes:
    """``[[{id, text, special, start, stop}]]``: one list per input."""
    return encode_json(
        [
            [{"id": t.id, "text": t.text, "special": t.special, "start": t.start, "stop": t.stop} for t in row]
            for row in tokens
        ]
    )
