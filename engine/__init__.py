"""InferPool's engine: load a model once, run it from a pool of per-worker runtimes.

No web framework is imported here; ``service`` is one front end built on this API.
"""

from engine.backends import BACKENDS
from engine.backends.base import Runtime
from engine.client import EngineClient, ModelInfo, ModelStats
from engine.errors import (
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
from engine.handlers import Handler
from engine.module import InferenceModule
from engine.options import RuntimeOptions
from engine.pool import RuntimePool
from engine.schema import Schema, TensorSpec
from engine.served import Prediction, ServedModel
from engine.sources import DEFAULT_MODEL, load_model
from engine.spec import ModelSpec

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
    "WorkerDied",
    "load_model",
]
