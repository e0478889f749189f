"""What a source string names, without loading anything: the archive suffixes, folders and the default model.

The config (inferpool.config) checks and resolves sources with these at import, before any model
loads, so this module imports no torch; the loaders themselves are inferpool.engine.models.sources'.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL = "inferpool.engine.zoo.digits:build"
ARCHIVE_SUFFIXES = {".pt2": "export", ".ts": "torchscript", ".torchscript": "torchscript", ".onnx": "onnx"}
"""An archive's suffix to the SOURCES entry (inferpool.engine.models.sources) that loads it."""


def kind_of(source: str) -> str:
    """The SOURCES entry that loads ``source``: a folder (a Hugging Face model), an archive by
    its suffix, else a ``package.module:function`` factory. A source without ':' is a path, so
    a missing folder is reported as one, not as a bad import string."""
    path = Path(source)
    if path.is_dir():
        return "folder"
    if path.suffix in ARCHIVE_SUFFIXES:
        return ARCHIVE_SUFFIXES[path.suffix]
    return "factory" if ":" in source else "folder"


def is_path(source: str) -> bool:
    """Whether ``source`` names a file or folder (relative paths in a config file are the file's)."""
    return kind_of(source) != "factory"
