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

With dynamic batching, a request's rows are batched with others of the same per-sample shape:
a handler that pads should pad to a few fixed lengths (buckets) so that requests can share a call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from inferpool.engine.errors import ModelLoadError
from inferpool.engine.schema import Array
from inferpool.engine.sources import import_object


class Handler(ABC):
    request_schema: ClassVar[dict[str, Any]] = {}
    response_schema: ClassVar[dict[str, Any]] = {}
    v2_inputs: ClassVar[list[dict[str, Any]]] = []
    """``[{"name", "datatype", "shape"}]`` as the v2 metadata route reports them."""
    v2_outputs: ClassVar[list[dict[str, Any]]] = []

    @abstractmethod
    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]: ...

    @abstractmethod
    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]: ...

    def samples(self, payload: object) -> int:
        return 1


def load_handler(ref: str) -> Handler:
    """``package.module:attr`` -> a Handler: attr is a Handler instance, or a class or factory
    called without arguments (once, at load)."""
    target = import_object(ref, "handler", "package.module:attr")
    handler = target if isinstance(target, Handler) else target()
    if not isinstance(handler, Handler):
        raise ModelLoadError(f"handler {ref!r} gave {type(handler).__name__}, not inferpool.engine.handlers.Handler")
    return handler
