"""The check of ``runtime.accuracy_inputs`` as a file, run by the options' validation (and so the
settings') before any model loads: a JSONL file of one call's inputs a line, or an ``.npz``. The
inputs themselves are read and checked against the model when it loads
(inferpool.engine.backends.held_out). Nothing heavy is imported here: the config imports it.
"""

from __future__ import annotations

import json
from pathlib import Path

SUFFIXES = (".jsonl", ".npz")


def check_file(path: str) -> str | None:
    """What is wrong with ``accuracy_inputs`` as a file, with how to fix it; None if nothing."""
    where = Path(path)
    if where.suffix not in SUFFIXES:
        return f"name a .jsonl file (one JSON object of the model's inputs a line) or an .npz of arrays, not {path!r}"
    if not where.is_file():
        return f"{path!r} does not exist or is not a file: give the path of your held-out inputs"
    if where.suffix == ".npz":
        return None
    try:
        lines = [line for line in where.read_text("utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path!r} cannot be read as UTF-8 text ({exc})"
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError as exc:
            return f"line {number} of {path!r} is not JSON ({exc}); write one JSON object a line"
        if not isinstance(row, dict) or not row:
            return f'line {number} of {path!r} is not a JSON object of inputs, like {{"image": [[0.5, ...]]}}'
    return None if lines else f"{path!r} holds no lines; write one JSON object of the model's inputs a line"
