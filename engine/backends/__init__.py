"""Backends by name; ``RuntimeOptions.backend`` picks one. Add new ones to the table."""

from __future__ import annotations

from engine.backends.base import Runtime
from engine.backends.eager import EagerRuntime

BACKENDS: dict[str, type[Runtime]] = {"eager": EagerRuntime}

__all__ = ["BACKENDS", "Runtime"]
