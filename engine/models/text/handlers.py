"""The handlers of a folder's model, one per kind, implementing the text routes' contract
(inferpool.engine.models.text_api) and /predict's and v2's own shapes (docs/models.md).

- embedder: text in (a string, a list, ``{"text": ...}``; v2 ``BYTES`` ``text``), ``embedding``
  (unit vectors), ``truncated`` and ``tokens`` out; the folder's default prompt is prefixed, as
  sentence-transformers' ``encode`` does.
- cross-encoder: ``{"query": ..., "texts": [...]}`` in (v2: ``query`` and ``text``), ``score``
  (the raw logit per text, in order), ``truncated`` and ``tokens`` out.
- classifier: text in as the embedder, ``logits``, ``scores`` (softmax, or sigmoid for a
  multi-label folder), ``truncated`` and ``tokens`` out; labels in config.json's order.

One string in gives one of each output, a list a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np

from inferpool.engine.errors import InvalidInput
from inferpool.engine.models.handlers import Handler, TextEmbedding, TokenIds
from inferpool.engine.models.text import payloads
from inferpool.engine.models.text.folder import FolderModel
from inferpool.engine.models.text.tokenizing import Encoded, FolderTokenizer
from inferpool.engine.models.text_api import ACTIVATIONS, TextClassification, TextInputs, TextPairs, TextRerank
from inferpool.engine.schema import Array


class Context(NamedTuple):
    single: bool
    truncated: Array
    tokens: Array
    unnormalized: bool = False
    """Whether the answer carries the embedding before normalisation (a TextInputs request)."""


def _one_or_many(kind: str) -> dict[str, Any]:
    item = {"type": kind}
    return {"oneOf": [item, {"type": "array", "items": item}]}


_VECTORS: dict[str, Any] = {
    "oneOf": [
        {"type": "array", "minItems": 1, "items": {"type": "number"}},
        {"type": "array", "minItems": 1, "items": {"type": "array", "items": {"type": "number"}}},
    ]
}
_COUNTS = {"truncated": _one_or_many("boolean"), "tokens": _one_or_many("integer")}
_TEXT_INPUT = [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
_COUNT_OUTPUTS = [
    {"name": "truncated", "datatype": "BOOL", "shape": [-1]},
    {"name": "tokens", "datatype": "INT64", "shape": [-1]},
]


class FolderHandler(Handler):
    """What the three kinds share: the tokenizer, text payloads, the per-row facts."""

    def __init__(self, found: FolderModel, tokenizer: FolderTokenizer, type_ids: bool = False) -> None:
        self.found, self.tokenizer, self.type_ids = found, tokenizer, type_ids
        self.text_tokenizer = tokenizer

    def samples(self, payload: object) -> int:
        value = payload.get("text") if isinstance(payload, Mapping) else payload
        value = value.ids if isinstance(value, TokenIds) else value
        value = value.texts if isinstance(value, TextInputs | TextPairs) else value
        return len(value) if isinstance(value, list | np.ndarray) and len(value) else 1

    def encoded(self, encoded: Encoded, single: bool, unnormalized: bool = False) -> tuple[dict[str, Array], Context]:
        arrays = encoded.arrays(self.type_ids)
        return arrays, Context(single, encoded.truncated, encoded.tokens, unnormalized)

    def answer(self, result: dict[str, Array], context: object) -> dict[str, Array]:
        assert isinstance(context, Context)
        result = result | {"truncated": context.truncated, "tokens": context.tokens}
        return {name: value[0] for name, value in result.items()} if context.single else result


class EmbedderHandler(FolderHandler):
    request_schema: ClassVar[dict[str, Any]] = payloads.TEXT_REQUEST_SCHEMA
    response_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"embedding": _VECTORS, **_COUNTS}}
    v2_inputs: ClassVar[list[dict[str, Any]]] = _TEXT_INPUT
    v2_outputs: ClassVar[list[dict[str, Any]]] = [
        {"name": "embedding", "datatype": "FP32", "shape": [-1, -1]},
        *_COUNT_OUTPUTS,
    ]

    def __init__(self, found: FolderModel, tokenizer: FolderTokenizer, type_ids: bool = False) -> None:
        super().__init__(found, tokenizer, type_ids)
        self.prompts = dict(found.prompts)
        # Token ids are this tokenizer's, whole sequences as `tokenizer.encode(text).ids` gives them.
        self.text_embedding = TextEmbedding(
            found.dimensions,
            token_ids=True,
            max_tokens=found.max_tokens,
            vocabulary=tokenizer.vocabulary,
            prompts=found.prompts,
            unnormalized="unnormalized",
        )

    def prompted(self, texts: list[str], prompt_name: str | None) -> list[str]:
        """The texts behind the named prompt, or the folder's default prompt (None: none)."""
        name = prompt_name or self.found.default_prompt
        if name is None:
            return texts
        if name not in self.prompts:
            known = ", ".join(sorted(self.prompts)) or "none"
            message = f"prompt_name {name!r} is not one of the model's prompts ({known})"
            raise InvalidInput(message, input_name="prompt_name")
        return [self.prompts[name] + text for text in texts]

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        if isinstance(payload, TokenIds):
            return self.encoded(self.tokenizer.token_ids(payload), single=False)
        if isinstance(payload, TextInputs):
            texts = payloads.text_list(payload.texts, "input")
            encoded = self.tokenizer.encode(self.prompted(texts, payload.prompt_name), payload.truncate)
            return self.encoded(encoded, single=False, unnormalized=True)
        texts, single = payloads.texts(payload)
        return self.encoded(self.tokenizer.encode(self.prompted(texts, None)), single)

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        pooled = np.asarray(outputs["pooled_embedding"], dtype=np.float32)
        norms = np.linalg.norm(pooled, axis=-1, keepdims=True)
        result = {"embedding": pooled / np.maximum(norms, 1e-12)}  # as torch's F.normalize
        if isinstance(context, Context) and context.unnormalized:
            result["unnormalized"] = pooled
        return self.answer(result, context)


class CrossEncoderHandler(FolderHandler):
    request_schema: ClassVar[dict[str, Any]] = payloads.PAIRS_REQUEST_SCHEMA
    response_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"score": {"type": "array", "items": {"type": "number"}}, **_COUNTS},
    }
    v2_inputs: ClassVar[list[dict[str, Any]]] = [
        {"name": "query", "datatype": "BYTES", "shape": [1]},
        {"name": "text", "datatype": "BYTES", "shape": [-1]},
    ]
    v2_outputs: ClassVar[list[dict[str, Any]]] = [{"name": "score", "datatype": "FP32", "shape": [-1]}, *_COUNT_OUTPUTS]

    def __init__(self, found: FolderModel, tokenizer: FolderTokenizer, type_ids: bool = False) -> None:
        super().__init__(found, tokenizer, type_ids)
        self.text_rerank = TextRerank(max_tokens=found.max_tokens)

    def samples(self, payload: object) -> int:
        if isinstance(payload, Mapping) and not isinstance(payload, TextPairs):
            return super().samples({"text": payload.get("texts", payload.get("text"))})
        return super().samples(payload)

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        if isinstance(payload, TextPairs):
            query, truncate = payloads.text(payload.query, None, "query"), payload.truncate
            texts = payloads.text_list(payload.texts, "texts")
        else:
            (query, texts), truncate = payloads.pairs(payload), True
        return self.encoded(self.tokenizer.encode_pairs(query, texts, truncate), single=False)

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        return self.answer({"score": outputs["score"]}, context)


class ClassifierHandler(FolderHandler):
    request_schema: ClassVar[dict[str, Any]] = payloads.TEXT_REQUEST_SCHEMA
    response_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"logits": _VECTORS, "scores": _VECTORS, **_COUNTS},
    }
    v2_inputs: ClassVar[list[dict[str, Any]]] = _TEXT_INPUT
    v2_outputs: ClassVar[list[dict[str, Any]]] = [
        {"name": "logits", "datatype": "FP32", "shape": [-1, -1]},
        {"name": "scores", "datatype": "FP32", "shape": [-1, -1]},
        *_COUNT_OUTPUTS,
    ]

    def __init__(self, found: FolderModel, tokenizer: FolderTokenizer, type_ids: bool = False) -> None:
        super().__init__(found, tokenizer, type_ids)
        self.text_classification = TextClassification(found.labels, found.activation, max_tokens=found.max_tokens)

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        if isinstance(payload, TextInputs):
            if payload.prompt_name is not None:
                raise InvalidInput("this model has no prompts; leave prompt_name out", input_name="prompt_name")
            texts = payloads.text_list(payload.texts, "input")
            return self.encoded(self.tokenizer.encode(texts, payload.truncate), single=False)
        texts, single = payloads.texts(payload)
        return self.encoded(self.tokenizer.encode(texts), single)

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        logits = np.asarray(outputs["logits"], dtype=np.float32)
        scores = ACTIVATIONS[self.found.activation](logits).astype(np.float32)
        return self.answer({"logits": logits, "scores": scores}, context)


HANDLERS: dict[str, type[FolderHandler]] = {
    "embedder": EmbedderHandler,
    "cross-encoder": CrossEncoderHandler,
    "classifier": ClassifierHandler,
}
