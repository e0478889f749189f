"""``auto``'s choice, kept beside the exports: a warm start serves the backend chosen before
without compiling and timing the others.

Timing every candidate means compiling every candidate: for a ResNet-50 that is two exports
(static's and onnxruntime's) and most of a 46 s start. The choice depends on what the ONNX
export's key already covers (the model's code, weights and schema, the versions, the machine),
plus the candidates and the options that change their scores (batching, threads), so it is
cached under those: the same model on the same machine chooses the same way, and anything that
could change the ranking is a new key, timed afresh. The winner is still compiled and checked
against eager on every start; a cached name that no longer compiles is timed again. Delete the
``*.auto.json`` file (or the cache) to have the candidates timed again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from inferpool.engine.backends.onnxruntime.export import source_key
from inferpool.engine.compile_cache import artifact_path, cache_dir, content_key, write_atomically
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions

log = logging.getLogger(__name__)
SUFFIX = ".auto.json"


def choice_path(module: InferenceModule, options: RuntimeOptions, names: Sequence[str]) -> Path | None:
    """Where the choice among ``names`` for ``module`` under ``options`` is kept; None when the
    model's code cannot be read (its key would need an export)."""
    base = source_key(module)
    if base is None:
        return None
    scored_by = (f"max_batch_size={options.max_batch_size}", f"intra_op_threads={options.intra_op_threads}")
    key = content_key([base, "auto-choice", ",".join(names), *scored_by])
    return artifact_path(cache_dir(options.compile_cache_dir), module.name, key, SUFFIX)


def read_choice(path: Path, names: Sequence[str]) -> tuple[str, list[dict[str, object]]] | None:
    """The chosen name and the table it was chosen from, or None (absent, unreadable, stale)."""
    try:
        saved = json.loads(path.read_text())
        chosen, table = saved["chosen"], saved["candidates"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if chosen not in names or not isinstance(table, list):
        return None
    return chosen, table


def write_choice(path: Path, chosen: str, table: list[dict[str, object]]) -> None:
    """Kept for the next start; a cache that cannot be written only costs that start its timing."""

    def produce(target: Path) -> None:
        target.write_text(json.dumps({"chosen": chosen, "candidates": table}))

    try:
        write_atomically(path, produce)
    except OSError as exc:
        log.info("auto: could not cache the choice in %s (%s); the next start times the candidates again", path, exc)
