"""Backends by name; ``RuntimeOptions.backend`` picks one. Add new ones to the table."""

from __future__ import annotations

from engine.backends.aoti import AotiRuntime
from engine.backends.base import Runtime
from engine.backends.eager import EagerRuntime
from engine.backends.onnxruntime import OnnxRuntime
from engine.backends.static import StaticRuntime
from engine.backends.torchscript import TorchScriptRuntime

BACKENDS: dict[str, type[Runtime]] = {
    "eager": EagerRuntime,
    "onnxruntime": OnnxRuntime,
    "torchscript": TorchScriptRuntime,
    "aoti": AotiRuntime,
    "static": StaticRuntime,
}

__all__ = ["BACKENDS", "Runtime"]
