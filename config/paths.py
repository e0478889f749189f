"""Paths in a config file mean what they say where the file is, and the user's own modules import.

A relative path written in a TOML file is taken from the file's folder, as Cargo, docker compose
and pyproject tools do, so ``inferpool serve --config deploy/my.toml`` works from any directory;
a path given as a flag or an environment variable is taken from the current directory, as any
command line's is. Import strings (``package.module:function``) are not paths: they import from
``app_dir`` (the current directory unless set), as uvicorn's and gunicorn's ``--app-dir`` do.
"""

from __future__ import annotations

import sys
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic_settings import TomlConfigSettingsSource

from inferpool.engine.models.source_kinds import is_path

# Top-level settings that are always paths, and those inside [runtime] (top level and per model).
PATH_SETTINGS = ("app_dir", "model_repository", "metrics_dir", "payload_log")
RUNTIME_PATH_SETTINGS = ("compile_cache_dir",)


def _resolved(value: Any, folder: Path) -> Any:
    if not isinstance(value, str) or not value or value == "-" or "://" in value or Path(value).is_absolute():
        return value  # "" and "-" keep their meaning (the default cache, stdout); a URL is not a path
    return str(folder / value)


def _source(value: Any, folder: Path) -> Any:
    """A model source is a path when it names an archive or a folder; an import string stays as written."""
    return _resolved(value, folder) if isinstance(value, str) and is_path(value) else value


def _runtime(table: Any, folder: Path) -> Any:
    if not isinstance(table, dict):
        return table
    return {key: _resolved(v, folder) if key in RUNTIME_PATH_SETTINGS else v for key, v in table.items()}


def _entry(entry: Any, folder: Path) -> Any:
    """One ``[[models]]`` table: its archive source and runtime paths from ``folder``."""
    if not isinstance(entry, dict):
        return entry
    entry = dict(entry)
    if "source" in entry:
        entry["source"] = _source(entry["source"], folder)
    if "runtime" in entry:
        entry["runtime"] = _runtime(entry["runtime"], folder)
    return entry


def resolve_paths(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` read from a config file in ``folder``, its relative paths made relative to ``folder``."""
    data = dict(data)
    for key in PATH_SETTINGS:
        if key in data:
            data[key] = _resolved(data[key], folder)
    if "model" in data:
        data["model"] = _source(data["model"], folder)
    if "runtime" in data:
        data["runtime"] = _runtime(data["runtime"], folder)
    if isinstance(data.get("models"), list):
        data["models"] = [_entry(entry, folder) for entry in data["models"]]
    return data


class ConfigFileSource(TomlConfigSettingsSource):
    """The TOML settings source, with relative paths taken from the file's own folder."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        data = super()._read_file(file_path)
        return resolve_paths(data, Path(str(file_path)).resolve().parent)


def make_importable(app_dir: Path) -> None:
    """Put ``app_dir`` first on the import path, once, so ``--model mymodels:build`` imports the
    user's ``mymodels.py`` there; InferPool's own modules are all under ``inferpool.``, so a user's
    ``config.py`` or ``engine/`` shadows nothing of ours."""
    folder = str(app_dir.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
