"""What every text route does to a model's raw outputs: a cross-encoder's logits ranked (best
first, as a relevance probability or raw), a classifier's logits as labelled scores, and the
prompt a request names checked against the embedder's."""

from __future__ import annotations

import numpy as np

from inferpool.engine.client import ACTIVATIONS, Array, TextClassification, TextEmbedding
from inferpool.service.http.body_fields import bad


def ranked(logits: Array, raw: bool, top: int | None = None) -> list[tuple[int, float]]:
    """(text index, score) best first, ties in the texts' order: the score the logit itself
    (``raw``) or its sigmoid, the relevance probability TEI and Cohere answer with."""
    values = np.asarray(logits, dtype=np.float64).reshape(-1)
    scores = values if raw else ACTIVATIONS["sigmoid"](values)
    order = np.argsort(-values, kind="stable")[:top]
    return [(int(index), float(scores[index])) for index in order]


def labelled(logits: Array, declared: TextClassification, raw: bool = False) -> list[list[dict[str, object]]]:
    """Each text's labels with their scores, best first."""
    values = np.asarray(logits, dtype=np.float64)
    scores = values if raw else ACTIVATIONS[declared.activation](values)
    labels = declared.labels
    return [[{"label": labels[i], "score": float(row[i])} for i in np.argsort(-row, kind="stable")] for row in scores]


def check_prompt(declared: TextEmbedding, prompt_name: str | None, model: str) -> None:
    """A named prompt must be one of the embedder's (a 400 naming ``prompt_name`` otherwise)."""
    if prompt_name is None:
        return
    names = [name for name, _ in declared.prompts]
    if prompt_name not in names:
        offered = f"its prompts are {', '.join(map(repr, names))}" if names else "it has no named prompts"
        raise bad(f"model {model!r} has no prompt {prompt_name!r}; {offered}", "prompt_name")
