"""Shared inputs and the sentence-transformers reference for the MiniLM tests."""

from __future__ import annotations

from functools import cache

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
def reference() -> np.ndarray:
    """sentence-transformers' own embeddings of SENTENCES, from the same packaged model, offline."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    from inferpool.engine.zoo.minilm import model_dir

    model = SentenceTransformer(str(model_dir()), device="cpu")
    return np.asarray(model.encode(SENTENCES, normalize_embeddings=True))


def cosines(got: object, want: np.ndarray) -> np.ndarray:
    array = np.asarray(got, dtype=np.float64)
    return (array * want).sum(-1) / (np.linalg.norm(array, axis=-1) * np.linalg.norm(want, axis=-1))
