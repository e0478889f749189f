"""What a source string names, without loading anything: the archive suffixes and the default model.

The config (inferpool.config) checks and resolves sources with these at import, before any model
loads, so this module imports no torch; the loaders themselves are inferpool.engine.models.sources'.
"""

from __future__ import annotations

DEFAULT_MODEL = "inferpool.engine.zoo.digits:build"
ARCHIVE_SUFFIXES = {".pt2": "export", ".ts": "torchscript", ".torchscript": "torchscript", ".onnx": "onnx"}
"""An archive's suffix to the SOURCES entry (inferpool.engine.models.sources) that loads it; any
other source is a ``package.module:function`` factory."""
