"""Backends by name; ``RuntimeOptions.backend`` picks one. Add new ones to the table."""

from __future__ import annotations

from engine.backends.base import Runtime
from engine.backends.eager import EagerRuntime
from engine.backends.onnxruntime import OnnxRuntime

BACKENDS: dict[str, type[Runtime]] = {"eager": EagerRuntime, "onnxruntime": OnnxRuntime}

__all__ = ["BACKENDS", "Runtime"]
