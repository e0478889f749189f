"""The config files ``inferpool tune`` writes: the settings it was given with a point of the search
space applied, as TOML that ``inferpool serve --config`` reads (config.load_settings). Each trial's
server is started from such a file, so the one written for the winner is one that served.

The standard library reads TOML but does not write it; the settings hold only strings, numbers,
booleans, lists of them, tables and lists of tables, which is all this writer knows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferpool.cli.tune.space import Knobs
from inferpool.config import Settings

NEVER_WRITTEN = {"api_key"}
"""Secrets stay in the environment (INFERPOOL_API_KEY), never in a file."""


def config_table(settings: Settings, knobs: Knobs) -> dict[str, Any]:
    """``settings`` as a config file holds them (only what differs from the defaults, the model
    always), with ``knobs`` written out in full."""
    table: dict[str, Any] = settings.model_dump(mode="json", exclude_defaults=True, exclude=NEVER_WRITTEN)
    table = {"model": settings.model, **table, "workers": knobs.workers}
    table["runtime"] = {**table.get("runtime", {}), **knobs.runtime()}
    return table


def write_config(path: Path, settings: Settings, knobs: Knobs, comment: str = "") -> Path:
    path.write_text(to_toml(config_table(settings, knobs), comment))
    return path


def to_toml(table: Mapping[str, Any], comment: str = "") -> str:
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    _table(lines, table, ())
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(lines: list[str], table: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """Scalars first, then sub-tables, then arrays of tables, as TOML requires."""
    subtables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    arrays = {k: v for k, v in table.items() if _array_of_tables(v)}
    for key, value in table.items():
        if value is not None and key not in subtables and key not in arrays:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in subtables.items():
        lines += ["", f"[{'.'.join(_key(p) for p in (*path, key))}]"]
        _table(lines, value, (*path, key))
    for key, items in arrays.items():
        for item in items:
            lines += ["", f"[[{'.'.join(_key(p) for p in (*path, key))}]]"]
            _table(lines, item, (*path, key))


def _array_of_tables(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, Mapping) for item in value)


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else json.dumps(key)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string, \uXXXX escapes included, is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value if item is not None) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to TOML")
