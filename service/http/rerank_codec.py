"""Cohere's, Jina's and Infinity's ``POST /v1/rerank`` (and Cohere v2's ``/v2/rerank``), and
Infinity's ``POST /classify``, on the wire.

``/v1/rerank`` answers Cohere's v2 shape, which Jina's and Infinity's clients read as well:
``{"id", "results": [{"index", "relevance_score", "document"?: {"text"}}], "model", "usage"}``.
``model`` is optional on both routes (service/http/text_models.py says which model serves then).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from inferpool.engine.client import Array, TextClassification, TextInputs, TextPairs, TextRerank
from inferpool.service.http.body_fields import BodyFields, bad, checked_text
from inferpool.service.http.codec import encode_json
from inferpool.service.http.text_scores import labelled, ranked

RERANK_FIELDS = ("model", "query", "documents", "top_n", "return_documents", "raw_scores")
"""Cohere's, and Infinity's ``raw_scores`` (its client sends it): the logits instead of their sigmoid."""
CLASSIFY_FIELDS = ("model", "input", "raw_scores")


@dataclass(frozen=True, slots=True)
class DocumentsRequest:
    model: str | None
    pairs: TextPairs
    top_n: int | None
    return_documents: bool
    raw_scores: bool = False


@dataclass(frozen=True, slots=True)
class ClassifyRequest:
    model: str | None
    inputs: TextInputs
    raw_scores: bool


def parse_documents(body: bytes | bytearray) -> DocumentsRequest:
    fields = BodyFields(body, RERANK_FIELDS, '{"model": "...", "query": "text", "documents": ["text", "..."]}')
    query = fields.text("query")
    given = fields.payload.get("documents")
    if not isinstance(given, list) or not given:
        raise bad("'documents' is required: a non-empty list of texts (or of {\"text\": ...} objects)", "documents")
    documents = [_document(item, index) for index, item in enumerate(given)]
    returned, raw = fields.flag("return_documents", False), fields.flag("raw_scores", False)
    return DocumentsRequest(fields.name("model"), TextPairs(query, documents), fields.count("top_n"), returned, raw)


def _document(item: object, index: int) -> str:
    """A document: a string, or Cohere's ``{"text": ...}``."""
    if isinstance(item, dict):
        if set(item) != {"text"}:
            raise bad(
                f"'documents' item {index} must be a string or {{\"text\": ...}}; got keys {sorted(item)}", "documents"
            )
        item = item["text"]
    return checked_text(item, "documents", index)


def parse_classify(body: bytes | bytearray) -> ClassifyRequest:
    fields = BodyFields(body, CLASSIFY_FIELDS, '{"model": "...", "input": ["text", "..."]}')
    return ClassifyRequest(
        fields.name("model"), TextInputs(fields.texts("input", one=True)), fields.flag("raw_scores", False)
    )


def _usage(outputs: Mapping[str, Array], name: str) -> dict[str, int]:
    tokens = int(np.sum(outputs[name]))
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def encode_documents(
    model: str, outputs: Mapping[str, Array], declared: TextRerank, request: DocumentsRequest, rid: str
) -> bytes:
    documents = request.pairs.texts
    results = [
        {"index": index, "relevance_score": score, "document": {"text": documents[index]}}
        if request.return_documents
        else {"index": index, "relevance_score": score}
        for index, score in ranked(outputs[declared.score], request.raw_scores, request.top_n)
    ]
    usage = _usage(outputs, declared.tokens)
    return encode_json({"id": rid, "object": "rerank", "results": results, "model": model, "usage": usage})


def encode_classes(
    model: str, outputs: Mapping[str, Array], declared: TextClassification, request: ClassifyRequest, rid: str
) -> bytes:
    data = labelled(outputs[declared.logits], declared, request.raw_scores)
    usage = _usage(outputs, declared.tokens)
    answer = {
        "object": "classify",
        "data": data,
        "model": model,
        "usage": usage,
        "id": rid,
        "created": int(time.time()),
    }
    return encode_json(answer)
