"""InferPool's engine: load a model once, run it from a pool of per-worker runtimes.

No web framework is imported here; ``service`` is one front end built on this API.
"""

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
from inferpool.engine.handlers import Handler, TextEmbedding, TokenIds
from inferpool.engine.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.pool import RuntimePool
from inferpool.engine.schema import Schema, TensorSpec
from inferpool.engine.served import Prediction, ServedModel
from inferpool.engine.sources import DEFAULT_MODEL, load_model
from inferpool.engine.spec import ModelSpec

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
