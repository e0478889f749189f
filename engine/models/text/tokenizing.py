"""A folder's fast tokenizer (``tokenizer.json``, the ``tokenizers`` library), padding to length
buckets, and the checks on token ids a request sends itself.

Buckets: a request is padded to the smallest length that holds its longest text. Few distinct
shapes, so that dynamic batching can put requests together (it needs equal per-sample shapes),
yet close enough that little is spent on padding: batched, a call's cost grows about linearly
with its tokens, so a 20-token sentence padded to 24 instead of 32 saves a quarter. Unbatched,
the call is dominated by reading the weights, the same at either width, so the width barely
matters there (docs/BENCHMARKS.md, "Batching over HTTP": the figures).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine.errors import InvalidInput, import_optional
from inferpool.engine.models.handlers import TokenIds
from inferpool.engine.models.text_api import Token
from inferpool.engine.schema import Array

BASE_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
INSTALL_HINT = "pip install 'inferpool[text]'"


def buckets(max_tokens: int) -> tuple[int, ...]:
    """The lengths a request is padded to, the last the model's limit."""
    return (*(b for b in BASE_BUCKETS if b < max_tokens), max_tokens)


def offline() -> None:
    """Loading a folder never touches the network, and the tokenizer starts no threads of its
    own (requests already run in parallel)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass(frozen=True, slots=True)
class Encoded:
    """Token sequences padded to a bucket: the model's arrays plus each row's facts."""

    ids: Array
    mask: Array
    truncated: Array
    type_ids: Array | None = None
    """Each token's segment (0: the query, 1: the text), for pairs."""

    @property
    def tokens(self) -> Array:
        return np.asarray(self.mask.sum(1))

    def arrays(self, with_type_ids: bool) -> dict[str, Array]:
        arrays = {"input_ids": self.ids, "attention_mask": self.mask}
        if with_type_ids:
            arrays["token_type_ids"] = self.type_ids if self.type_ids is not None else np.zeros_like(self.ids)
        return arrays


class FolderTokenizer:
    """``tokenizer.json`` with truncation at ``max_tokens``; thread-safe (configured once, here)."""

    def __init__(self, folder: Path, max_tokens: int, pad_id: int, pairs: bool = False) -> None:
        offline()
        self.max_tokens, self.pad_id, self.buckets = max_tokens, pad_id, buckets(max_tokens)
        self.single = self._load(folder, "longest_first")
        # Pairs truncate only their second text (never the query): a tokenizer configured so, once.
        self.pairs = self._load(folder, "only_second") if pairs else None

    def _load(self, folder: Path, strategy: str) -> Any:
        tokenizers = import_optional("tokenizers", "a Hugging Face folder model", INSTALL_HINT)
        tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens, strategy=strategy)
        return tokenizer

    @property
    def vocabulary(self) -> int:
        return int(self.single.get_vocab_size())

    def encode(self, texts: Sequence[str], truncate: bool = True) -> Encoded:
        encodings = self.single.encode_batch(list(texts))
        truncated = np.array([bool(e.overflowing) for e in encodings], dtype=bool)
        if not truncate and truncated.any():
            index = int(truncated.argmax())
            raise InvalidInput(
                f"text {index} is longer than the model's {self.max_tokens} tokens; shorten it or allow truncation",
                input_name="texts",
            )
        ids, mask = self.padded([e.ids for e in encodings])
        return Encoded(ids, mask, truncated)

    def encode_pairs(self, query: str, texts: Sequence[str], truncate: bool = True) -> Encoded:
        """(query, text) pairs; a long pair loses the end of its text, never of the query."""
        if self.pairs is None:
            raise InvalidInput("this model scores single texts, not (query, text) pairs", input_name="query")
        try:
            encodings = self.pairs.encode_batch([(query, text) for text in texts])
        except Exception as exc:  # noqa: BLE001 -- tokenizers raises a bare Exception: the query alone is too long
            raise InvalidInput(
                f"the query leaves no room for a text within the model's {self.max_tokens} tokens ({exc}); "
                "send a shorter query",
                input_name="query",
            ) from None
        truncated = np.array([bool(e.overflowing) for e in encodings], dtype=bool)
        if not truncate and truncated.any():
            raise InvalidInput(
                f"text {int(truncated.argmax())} with the query is longer than the model's {self.max_tokens} tokens; "
                "shorten it or allow truncation",
                input_name="texts",
            )
        ids, mask = self.padded([e.ids for e in encodings])
        type_ids, _ = self.padded([e.type_ids for e in encodings], pad=0)
        return Encoded(ids, mask, truncated, type_ids)

    def padded(self, sequences: Sequence[Sequence[int]], pad: int | None = None) -> tuple[Array, Array]:
        """input_ids and attention_mask of sequences (each 1..max_tokens long), padded to the
        smallest bucket that holds the longest."""
        width = next(b for b in self.buckets if b >= max(map(len, sequences)))
        ids = np.full((len(sequences), width), self.pad_id if pad is None else pad, dtype=np.int64)
        mask = np.zeros((len(sequences), width), dtype=np.int64)
        for row, sequence in enumerate(sequences):
            ids[row, : len(sequence)] = sequence
            mask[row, : len(sequence)] = 1
        return ids, mask

    def token_ids(self, given: TokenIds) -> Encoded:
        """Token sequences as sent: checked, never cut (the caller chose them; cutting one would
        drop its closing special token)."""
        if not given.ids:
            raise InvalidInput("send at least one list of token ids", input_name="input")
        vocabulary = self.vocabulary
        for index, sequence in enumerate(given.ids):
            if not 0 < len(sequence) <= self.max_tokens:
                raise InvalidInput(
                    f"token list {index} has {len(sequence)} tokens; send 1 to {self.max_tokens} (the model's "
                    "limit, special tokens included)",
                    input_name="input",
                )
            bad = next((token for token in sequence if not 0 <= token < vocabulary), None)
            if bad is not None:
                raise InvalidInput(
                    f"token list {index} holds {bad}, which is not in the model's vocabulary (0 to {vocabulary - 1})",
                    input_name="input",
                )
        ids, mask = self.padded(given.ids)
        return Encoded(ids, mask, np.zeros(len(ids), dtype=bool))

    def tokenize(self, texts: list[str], add_special_tokens: bool) -> list[list[Token]]:
        """TEI's /tokenize: each text's tokens as the model gets them (text_api.TextTokenizer). A
        token's text is its span of the input, as TEI reports it (a special token, which has no
        span, is its token string)."""
        encodings = self.single.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [_tokens(text, encoding) for text, encoding in zip(texts, encodings, strict=True)]


def _tokens(text: str, encoding: Any) -> list[Token]:
    found = zip(encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets, strict=True)
    return [
        Token(token_id, piece, True, None, None) if special else Token(token_id, text[start:stop], False, start, stop)
        for token_id, piece, special, (start, stop) in found
    ]
