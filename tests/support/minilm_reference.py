"""Shared inputs and the sentence-transformers reference for the MiniLM tests."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

SENTENCES = [
    "Hi.",
    "The quick brown fox jumps over the lazy dog.",
    "Serving a transformer on CPUs is mostly a question of batching and thread budgets, " * 3,
    "Ça marche aussi en français, und auf Deutsch, 日本語でも。",
    "A long one. " + "This sentence keeps going well beyond the model's limit of tokens. " * 30,
]
LONG = len(SENTENCES) - 1


@cache
def sentence_transformer() -> Any:
    """The packaged model loaded by sentence-transformers itself, offline."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    from inferpool.engine.zoo.minilm import model_dir

    return SentenceTransformer(str(model_dir()), device="cpu")


@cache
def reference() -> np.ndarray:
    """sentence-transformers' own embeddings of SENTENCES."""
    return np.asarray(sentence_transformer().encode(SENTENCES, normalize_embeddings=True))


def token_ids(texts: list[str]) -> list[list[int]]:
    """Each text's token ids as sentence-transformers embeds it (special tokens in, cut at its
    max_seq_length)."""
    model = sentence_transformer()
    encoded = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)
    return [list(ids) for ids in encoded["input_ids"]]


def cosines(got: object, want: np.ndarray) -> np.ndarray:
    array = np.asarray(got, dtype=np.float64)
    return (array * want).sum(-1) / (np.linalg.norm(array, axis=-1) * np.linalg.norm(want, axis=-1))
