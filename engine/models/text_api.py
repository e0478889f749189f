"""What a text model's handler declares, and the requests the text routes send it.

A handler whose model reads text sets some of these on itself (class or instance); each
declaration is what one family of routes serves (docs/routes.md):

- :class:`~inferpool.engine.models.handlers.TextEmbedding` (``text_embedding``): OpenAI's
  ``/v1/embeddings`` and TEI's ``/embed``;
- :class:`TextRerank` (``text_rerank``): TEI's ``/rerank`` and Cohere's, Jina's and Infinity's
  ``/v1/rerank``;
- :class:`TextClassification` (``text_classification``): Infinity's ``/classify``;
- :class:`TextTokenizer` (``text_tokenizer``): TEI's ``/tokenize``.

A route sends ``preprocess`` one of the request types below. No JSON value decodes to them, so
only a route that means one can send it; ``/predict`` and v2 keep each handler's own shapes.
Whatever a handler refuses (a text over ``max_tokens`` with ``truncate`` off, an unknown
``prompt_name``) it raises as ``InvalidInput``: a 400 naming the problem.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[Any]


def sigmoid(logits: Scores) -> Scores:
    result: Scores = 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))
    return result


def softmax(logits: Scores) -> Scores:
    shifted = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(shifted - shifted.max(axis=-1, keepdims=True))
    result: Scores = shifted / shifted.sum(axis=-1, keepdims=True)
    return result


ACTIVATIONS: dict[str, Callable[[Scores], Scores]] = {"softmax": softmax, "sigmoid": sigmoid}
"""How a classifier's logits become scores (float64): one label per text (softmax) or several
(sigmoid). A cross-encoder's relevance score is the sigmoid of its logit."""


@dataclass(frozen=True, slots=True)
class TextInputs:
    """Texts for an embedder or a classifier, with the options TEI's and OpenAI's APIs carry."""

    texts: list[str]
    truncate: bool = True
    """False: a text longer than the model takes is refused (400) instead of cut."""
    prompt_name: str | None = None
    """An embedder's named prompt (the folder's ``config_sentence_transformers.json`` prompts),
    prefixed to every text; None: the folder's default prompt, if any."""
    normalize: bool = True
    """False: the embedding before L2 normalisation (TEI's ``normalize``), where the handler
    declares ``TextEmbedding.unnormalized``."""


@dataclass(frozen=True, slots=True)
class TextPairs:
    """One query against several texts, for a cross-encoder: a score per (query, text) pair."""

    query: str
    texts: list[str]
    truncate: bool = True


@dataclass(frozen=True, slots=True)
class TextRerank:
    """A handler's declaration that its model is a cross-encoder.

    The routes send ``preprocess`` a :class:`TextPairs` and read ``postprocess``'s ``score``
    output: one raw score (the logit) per text, float32 ``[n]``, in the texts' order, and the
    ``tokens`` output, each pair's token count. The routes apply the sigmoid (TEI's
    ``raw_scores`` off, Cohere's ``relevance_score``) and sort."""

    score: str = "score"
    tokens: str = "tokens"
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TextClassification:
    """A handler's declaration that its model classifies text into ``labels``.

    The routes send ``preprocess`` a :class:`TextInputs` and read the ``logits`` output,
    float32 ``[n, len(labels)]``, and the ``tokens`` output; they turn logits into scores with
    ``activation``."""

    labels: tuple[str, ...]
    activation: Literal["softmax", "sigmoid"] = "softmax"
    logits: str = "logits"
    tokens: str = "tokens"
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Token:
    """One token as TEI's ``/tokenize`` reports it: its id, its text, whether it is a special
    token, and its character span in the input (``start``/``stop`` None for a special token)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TextTokenizer(Protocol):
    """A handler's tokenizer, as ``/tokenize`` uses it (no model call: it runs on the front
    end's thread, so it must be fast and thread-safe)."""

    def tokenize(self, texts: list[str], add_special_tokens: bool) -> list[list[Token]]: ...
