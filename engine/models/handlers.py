"""Model handlers: per-model pre- and post-processing around the tensor model.

Tensor-in/tensor-out is the default; a model that takes text (or images, ...) declares a
handler next to it in the config (``handler = "package.module:attr"``). Both hooks run on the
thread that runs the model (a worker thread, or the event loop when the model runs inline),
around the usual checks:

    payload --preprocess--> (input arrays, context) --schema checks--> model
            --> output arrays --postprocess(outputs, context)--> named outputs

- ``preprocess(payload)`` gets the request's ``inputs`` as sent (the JSON value of
  ``{"inputs": ...}`` on /predict, or ``{name: numpy array}`` from v2 infer, where text arrives
  as ``BYTES``: an object array of ``bytes``), and returns the model's input arrays, always with
  a batch dimension, plus any context postprocess needs (e.g. "was it one sample?"). Raise
  ``inferpool.engine.errors.InvalidInput`` for bad input: the caller gets a 400 with its message.
- ``postprocess(outputs, context)`` gets this request's rows of the model outputs and returns
  named outputs as numpy arrays (or numbers): /predict sends them as JSON, v2 as tensors.
- ``samples(payload)`` counts samples for admission control before validation (cheap, 1 if unsure).
- ``request_schema`` / ``response_schema`` are the JSON Schemas of /predict's ``inputs`` and
  ``outputs``, for the OpenAPI docs; ``v2_inputs`` / ``v2_outputs`` the v2 metadata tensors.
- ``text_embedding``, set by a handler whose model embeds text, is what OpenAI's embeddings API
  (``/v1/embeddings``) serves: see :class:`TextEmbedding`; ``text_rerank``,
  ``text_classification`` and ``text_tokenizer`` are the other text routes' (text_api).

With dynamic batching, a request's rows are batched with others of the same per-sample shape:
a handler that pads should pad to a few fixed lengths (buckets) so that requests can share a call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.text_api import TextClassification, TextRerank, TextTokenizer
from inferpool.engine.schema import Array


@dataclass(frozen=True, slots=True)
class TextEmbedding:
    """A handler's declaration that its model embeds text, so that ``/v1/embeddings`` serves it.

    The route sends ``preprocess`` a list of strings (one or more), or :class:`TokenIds` when
    ``token_ids`` says the handler takes them, and reads two of ``postprocess``'s outputs: the
    ``embedding`` output, one unit vector of ``dimensions`` floats per input, and the ``tokens``
    output, each input's token count as embedded (what the API's ``usage`` reports)."""

    dimensions: int
    embedding: str = "embedding"
    tokens: str = "tokens"
    token_ids: bool = False
    """Whether ``preprocess`` takes :class:`TokenIds` (the API's token-array inputs)."""
    max_tokens: int | None = None
    """The longest token list ``preprocess`` takes (None: no limit it can state)."""
    prompts: tuple[tuple[str, str], ...] = ()
    """Named prompts ``(name, prefix)`` a request may ask for (``prompt_name``)."""
    unnormalized: str | None = None
    """The output holding each embedding before L2 normalisation, where the handler offers it
    (TEI's ``normalize: false``); None: only unit vectors."""
    vocabulary: int | None = None
    """Token ids run from 0 to ``vocabulary - 1`` (the OpenAPI spec says so, so that it accepts
    only what the handler does)."""


@dataclass(frozen=True, slots=True)
class TokenIds:
    """Inputs that arrive tokenised: each a non-empty list of the model's own vocabulary ids,
    the whole sequence its tokenizer makes (special tokens included). No JSON value decodes to
    this type, so only a route that means it (``/v1/embeddings``) can send it."""

    ids: list[list[int]]


class Handler(ABC):
    request_schema: ClassVar[dict[str, Any]] = {}
    response_schema: ClassVar[dict[str, Any]] = {}
    v2_inputs: ClassVar[list[dict[str, Any]]] = []
    """``[{"name", "datatype", "shape"}]`` as the v2 metadata route reports them."""
    v2_outputs: ClassVar[list[dict[str, Any]]] = []
    text_embedding: TextEmbedding | None = None
    """Set (on the class or the instance) when the model embeds text: ``/v1/embeddings`` serves
    it (:class:`TextEmbedding`)."""
    text_rerank: TextRerank | None = None
    """Set when the model is a cross-encoder (inferpool.engine.models.text_api)."""
    text_classification: TextClassification | None = None
    """Set when the model classifies text (inferpool.engine.models.text_api)."""
    text_tokenizer: TextTokenizer | None = None
    """Set when ``/tokenize`` may use the handler's tokenizer (inferpool.engine.models.text_api)."""

    @abstractmethod
    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]: ...

    @abstractmethod
    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]: ...

    def samples(self, payload: object) -> int:
        return 1


def load_handler(ref: str) -> Handler:
    """``package.module:attr`` -> a Handler: attr is a Handler instance, or a class or factory
    called without arguments (once, at load)."""
    from inferpool.engine.models.sources import import_object  # imports torch: not at a front end's import

    target = import_object(ref, "handler", "package.module:attr")
    handler = target if isinstance(target, Handler) else target()
    if not isinstance(handler, Handler):
        raise ModelLoadError(f"handler {ref!r} gave {type(handler).__name__}, not inferpool.engine.Handler")
    return handler
