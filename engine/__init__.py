"""InferPool's engine: load a model once, run it from a pool of per-worker runtimes.

No web framework is imported here; ``service`` is one front end built on this API.

The engine's rooms: ``serving`` (the request path: ``ServedModel``, admission, the pipeline,
the runtimes' pool), ``plan`` (start-up: loading, the measurements taken before a model serves
and the plan made from them: threads, dispatch, batching, the wide lane, the deadline floor),
``models`` (sources, ``ModelSpec``, ``InferenceModule``, handlers), ``backends`` (the runtimes),
``executors`` (where a request runs) and ``zoo`` (the built-in models). At the root, what they
all share: ``client`` and ``errors`` (a front end's whole view), ``schema``, ``options``,
``compile_cache``.

The names below load on first use (PEP 562): importing one light module of the engine
(``inferpool.engine.client``, ``inferpool.engine.errors``: all a front end needs) must not
import torch, which this package's heavier modules do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferpool.engine.backends import BACKENDS
    from inferpool.engine.backends.base import Runtime
    from inferpool.engine.client import EngineClient, ModelInfo, ModelStats
    from inferpool.engine.errors import (
        ConfigError,
        DeadlineExceeded,
        EngineError,
        InvalidInput,
        ModelFailed,
        ModelLoadError,
        NonFiniteOutput,
        NotReady,
        Overloaded,
        PredictedWaitExceeded,
        WorkerDied,
    )
    from inferpool.engine.models.handlers import Handler, TextEmbedding, TokenIds
    from inferpool.engine.models.module import InferenceModule
    from inferpool.engine.models.source_kinds import DEFAULT_MODEL
    from inferpool.engine.models.sources import load_model
    from inferpool.engine.models.spec import ModelSpec
    from inferpool.engine.options import RuntimeOptions
    from inferpool.engine.schema import Schema, TensorSpec
    from inferpool.engine.serving.pool import RuntimePool
    from inferpool.engine.serving.served import Prediction, ServedModel

_ERRORS = (
    "ConfigError", "DeadlineExceeded", "EngineError", "InvalidInput", "ModelFailed", "ModelLoadError",
    "NonFiniteOutput", "NotReady", "Overloaded", "PredictedWaitExceeded", "WorkerDied",
)  # fmt: skip
_HOME = {
    "BACKENDS": "backends",
    "Runtime": "backends.base",
    "EngineClient": "client",
    "ModelInfo": "client",
    "ModelStats": "client",
    **dict.fromkeys(_ERRORS, "errors"),
    "Handler": "models.handlers",
    "TextEmbedding": "models.handlers",
    "TokenIds": "models.handlers",
    "InferenceModule": "models.module",
    "RuntimeOptions": "options",
    "RuntimePool": "serving.pool",
    "Schema": "schema",
    "TensorSpec": "schema",
    "Prediction": "serving.served",
    "ServedModel": "serving.served",
    "DEFAULT_MODEL": "models.source_kinds",
    "load_model": "models.sources",
    "ModelSpec": "models.spec",
}
__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "ConfigError",
    "DeadlineExceeded",
    "EngineClient",
    "EngineError",
    "Handler",
    "InferenceModule",
    "InvalidInput",
    "ModelFailed",
    "ModelInfo",
    "ModelLoadError",
    "ModelSpec",
    "ModelStats",
    "NonFiniteOutput",
    "NotReady",
    "Overloaded",
    "PredictedWaitExceeded",
    "Prediction",
    "Runtime",
    "RuntimeOptions",
    "RuntimePool",
    "Schema",
    "ServedModel",
    "TensorSpec",
    "TextEmbedding",
    "TokenIds",
    "WorkerDied",
    "load_model",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once: the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
