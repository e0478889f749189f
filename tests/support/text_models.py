"""Three tiny text models that implement the text routes' contract (inferpool.engine.models.text_api),
for the routes' tests before any real folder model: an embedder (with named prompts and its
embeddings before normalisation), a cross-encoder and a three-label classifier.

Each is a seeded torch module over a hashing tokenizer (words and punctuation, each id a crc32 of
the lower-cased word) with its handler; serve them as ``--models`` entries (``MODELS``). The
tests compute the same module eagerly as the reference (``reference_*``).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from inferpool.engine import ModelSpec
from inferpool.engine.client import (
    NOT_BLANK,
    Handler,
    TextClassification,
    TextEmbedding,
    TextInputs,
    TextPairs,
    TextRerank,
    Token,
)
from inferpool.engine.errors import InvalidInput
from inferpool.engine.schema import Array

VOCAB = 1000
PAD, CLS, SEP = 0, 1, 2
WIDTH = 16
MAX_TOKENS = 32
"""Each model's limit, special tokens included: short, so that truncation is easy to reach."""
BUCKETS = (8, 16, 32)
MAX_SAMPLES = 8
"""Each model's max_request_samples as ``MODELS`` serves it (the spec's list limits say so)."""
PROMPTS = (("query", "query: "), ("passage", "passage: "))
LABELS = ("negative", "neutral", "positive")
WORD = re.compile(r"\w+|[^\w\s]")


def word_id(word: str) -> int:
    return 3 + zlib.crc32(word.lower().encode()) % (VOCAB - 3)


class HashingTokenizer:
    """The models' tokenizer; also their ``text_tokenizer`` (TEI's /tokenize)."""

    def words(self, text: str) -> list[int]:
        return [word_id(m.group()) for m in WORD.finditer(text)]

    def tokenize(self, texts: list[str], add_special_tokens: bool) -> list[list[Token]]:
        rows = []
        for text in texts:
            row = [Token(word_id(m.group()), m.group(), False, m.start(), m.end()) for m in WORD.finditer(text)]
            if add_special_tokens:
                row = [Token(CLS, "[CLS]", True, None, None), *row, Token(SEP, "[SEP]", True, None, None)]
            rows.append(row)
        return rows


TOKENIZER = HashingTokenizer()


def encode_text(text: str, truncate: bool = True) -> list[int]:
    """[CLS] words [SEP], cut to MAX_TOKENS (or refused, without ``truncate``)."""
    words = TOKENIZER.words(text)
    if len(words) + 2 > MAX_TOKENS and not truncate:
        raise InvalidInput(f"a text has {len(words) + 2} tokens; the model takes {MAX_TOKENS}", input_name="text")
    return [CLS, *words[: MAX_TOKENS - 2], SEP]


def encode_pair(query: str, text: str, truncate: bool = True) -> tuple[list[int], list[int]]:
    """[CLS] query [SEP] text [SEP] and its token types; the text is cut, never the query."""
    head = [CLS, *TOKENIZER.words(query), SEP]
    if len(head) + 2 > MAX_TOKENS:
        raise InvalidInput(f"the query has {len(head)} tokens; it must leave room for a text in {MAX_TOKENS}")
    words = TOKENIZER.words(text)
    room = MAX_TOKENS - len(head) - 1
    if len(words) > room and not truncate:
        raise InvalidInput(f"a pair has {len(head) + len(words) + 1} tokens; the model takes {MAX_TOKENS}")
    tail = [*words[:room], SEP]
    return head + tail, [0] * len(head) + [1] * len(tail)


def padded(rows: Sequence[Sequence[int]]) -> tuple[Array, Array]:
    """input_ids and attention_mask, zero-padded to the smallest bucket that holds the longest row."""
    lengths = np.array([len(row) for row in rows])
    width = next(b for b in BUCKETS if b >= lengths.max())
    mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
    ids = np.zeros_like(mask)
    ids[mask.astype(bool)] = np.concatenate([np.asarray(row, dtype=np.int64) for row in rows])
    return ids, mask


class Encoder(torch.nn.Module):
    """Token and type embeddings, a tanh layer, mean pooling; ``heads`` outputs (0: the pooled vector)."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        torch.manual_seed(7 + heads)
        self.tokens = torch.nn.Embedding(VOCAB, WIDTH)
        self.types = torch.nn.Embedding(2, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, max(heads, 1))

    def pooled(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.mix(self.tokens(ids) + self.types(types)))
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class Embedder(Encoder):
    def __init__(self) -> None:
        super().__init__(0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        vector = self.pooled(input_ids, torch.zeros_like(input_ids), attention_mask)
        return F.normalize(vector, p=2.0, dim=1), vector


class CrossEncoder(Encoder):
    def __init__(self) -> None:
        super().__init__(1)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        return self.head(self.pooled(input_ids, token_type_ids, attention_mask))[:, 0]


class Classifier(Encoder):
    def __init__(self) -> None:
        super().__init__(len(LABELS))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.pooled(input_ids, torch.zeros_like(input_ids), attention_mask))


def _example(types: bool = False) -> dict[str, torch.Tensor]:
    ids, mask = padded([encode_text("An example text.")])
    example = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    if types:
        example = {"input_ids": example["input_ids"], "token_type_ids": torch.zeros_like(example["input_ids"]),
                   "attention_mask": example["attention_mask"]}  # fmt: skip
    return example


def _dynamic(example: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {name: (1,) for name in example}


def embedder() -> ModelSpec:
    example = _example()
    return ModelSpec(Embedder(), example, ("embedding", "raw"), name="tiny-embed", dynamic_dims=_dynamic(example))


def cross_encoder() -> ModelSpec:
    example = _example(types=True)
    return ModelSpec(CrossEncoder(), example, ("score",), name="tiny-rerank", dynamic_dims=_dynamic(example))


def classifier() -> ModelSpec:
    example = _example()
    return ModelSpec(Classifier(), example, ("logits",), name="tiny-classify", dynamic_dims=_dynamic(example))


class _Texts(NamedTuple):
    single: bool
    tokens: Array


_TEXT: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK}


def _texts(payload: object) -> tuple[list[str], bool, bool, str]:
    """(texts, one string?, truncate, prompt prefix) of a route's TextInputs or /predict's text(s)."""
    if isinstance(payload, TextInputs):
        prompt = dict(PROMPTS).get(payload.prompt_name or "", "")
        return payload.texts, False, payload.truncate, prompt
    if isinstance(payload, Mapping) and isinstance(payload.get("text"), np.ndarray):  # v2: BYTES
        payload = [_decoded(item) for item in payload["text"].reshape(-1).tolist()]
    if isinstance(payload, str) and payload.strip():
        return [payload], True, True, ""
    if isinstance(payload, list) and payload and all(isinstance(t, str) and t.strip() for t in payload):
        return payload, False, True, ""
    raise InvalidInput("send a non-blank text or a non-empty list of them", input_name="text")


def _decoded(item: object) -> object:
    return item.decode(errors="replace") if isinstance(item, bytes) else item


class TinyHandler(Handler):
    """What the three handlers share: /predict takes a text or a list of texts, v2 a BYTES ``text``."""

    request_schema: ClassVar[dict[str, Any]] = {"oneOf": [_TEXT, {"type": "array", "minItems": 1, "items": _TEXT}]}
    v2_inputs: ClassVar[list[dict[str, Any]]] = [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    text_tokenizer = TOKENIZER

    def samples(self, payload: object) -> int:
        texts = payload.texts if isinstance(payload, TextInputs | TextPairs) else payload
        return len(texts) if isinstance(texts, list) and texts else 1

    def encoded(self, payload: object) -> tuple[dict[str, Array], _Texts]:
        texts, single, truncate, prompt = _texts(payload)
        ids, mask = padded([encode_text(prompt + text, truncate) for text in texts])
        return {"input_ids": ids, "attention_mask": mask}, _Texts(single, mask.sum(1))

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        return self.encoded(payload)

    def answer(self, outputs: dict[str, Array], context: object) -> dict[str, Array]:
        assert isinstance(context, _Texts)
        outputs["tokens"] = context.tokens
        return {name: value[0] for name, value in outputs.items()} if context.single else outputs


class EmbedderHandler(TinyHandler):
    text_embedding = TextEmbedding(WIDTH, max_tokens=MAX_TOKENS, prompts=PROMPTS, unnormalized="raw")

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        return self.answer({"embedding": outputs["embedding"], "raw": outputs["raw"]}, context)


class ClassifierHandler(TinyHandler):
    text_classification = TextClassification(LABELS, max_tokens=MAX_TOKENS)

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        return self.answer({"logits": outputs["logits"]}, context)


class CrossEncoderHandler(TinyHandler):
    """/predict takes ``{"query": ..., "texts": [...]}``; the rerank routes send TextPairs."""

    request_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["query", "texts"],
        "additionalProperties": False,
        "properties": {"query": _TEXT, "texts": {"type": "array", "minItems": 1, "items": _TEXT}},
    }
    text_rerank = TextRerank(max_tokens=MAX_TOKENS)
    v2_inputs: ClassVar[list[dict[str, Any]]] = [
        {"name": "query", "datatype": "BYTES", "shape": [1]},
        {"name": "texts", "datatype": "BYTES", "shape": [-1]},
    ]

    def samples(self, payload: object) -> int:
        if isinstance(payload, dict) and isinstance(payload.get("texts"), list):
            return max(1, len(payload["texts"]))
        return super().samples(payload)

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        if isinstance(payload, Mapping):
            query, texts = payload.get("query"), payload.get("texts")
            if isinstance(query, np.ndarray) and isinstance(texts, np.ndarray):  # v2: BYTES
                query, texts = _decoded(query.reshape(-1)[0]), [_decoded(t) for t in texts.reshape(-1).tolist()]
            payload = TextPairs(str(query or ""), [str(t) for t in texts or []])
        if not isinstance(payload, TextPairs) or not payload.texts or not payload.query.strip():
            raise InvalidInput('send {"query": "text", "texts": ["text", ...]}', input_name="texts")
        pairs = [encode_pair(payload.query, text, payload.truncate) for text in payload.texts]
        ids, mask = padded([ids for ids, _ in pairs])
        types = np.zeros_like(ids)
        for row, (_, kinds) in enumerate(pairs):
            types[row, : len(kinds)] = kinds
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}, _Texts(False, mask.sum(1))

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        return self.answer({"score": outputs["score"]}, context)


def _entry(factory: str, handler: str) -> dict[str, Any]:
    return {"source": f"tests.support.text_models:{factory}", "handler": f"tests.support.text_models:{handler}",
            "runtime": {"backend": "eager", "max_request_samples": MAX_SAMPLES}}  # fmt: skip


MODELS = json.dumps(
    [
        _entry("embedder", "EmbedderHandler"),
        _entry("cross_encoder", "CrossEncoderHandler"),
        _entry("classifier", "ClassifierHandler"),
    ]
)
"""The three as a ``--models`` value."""


def reference_scores(query: str, texts: list[str]) -> np.ndarray:
    """The cross-encoder's logits, computed eagerly pair by pair."""
    model = CrossEncoder().eval()
    logits = []
    with torch.no_grad():
        for text in texts:
            ids, kinds = encode_pair(query, text)
            tensor = torch.tensor([ids])
            logits.append(float(model(tensor, torch.tensor([kinds]), torch.ones_like(tensor))[0]))
    return np.array(logits)


def reference_logits(texts: list[str]) -> np.ndarray:
    model = Classifier().eval()
    with torch.no_grad():
        return np.stack(
            [
                model(torch.tensor([encode_text(t)]), torch.ones(1, len(encode_text(t)), dtype=torch.long))[0].numpy()
                for t in texts
            ]
        )


def reference_embeddings(texts: list[str], prompt: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(unit, raw) embeddings, eagerly, one text at a time."""
    model = Embedder().eval()
    units, raws = [], []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([encode_text(prompt + text)])
            unit, raw = model(ids, torch.ones_like(ids))
            units.append(unit[0].numpy())
            raws.append(raw[0].numpy())
    return np.stack(units), np.stack(raws)
