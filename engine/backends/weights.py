"""The torch weights of a model another backend serves, moved out of memory into a mapped file.

Once an artifact that holds its own weights (an onnxruntime session) is built and checked, the
torch module's parameters and buffers are only a second copy (docs/BENCHMARKS.md, "Weights once
(issue 22)"). They cannot
simply be dropped, since the module still answers for what the process may need later (the
eager reference of a parity check, ``auto``'s candidates, a test that shares the module), so
they are re-pointed at a copy of themselves in the compile cache, memory-mapped copy-on-write
(``torch.load(mmap=True)``): the module computes as before, but a page of weights is resident
only after something reads it, and nothing does while the other backend serves. The memory
they held goes back (the allocator's free pages too: ``malloc_trim``).

The file is named by the artifact's cache key, which covers the weights' names, dtypes, shapes
and bytes, so the copy found under it is the weights it replaces; names, dtypes and shapes are
compared again before anything is swapped.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import torch

from inferpool.engine.compile_cache import write_atomically

log = logging.getLogger(__name__)


def _save(values: Mapping[str, torch.Tensor], path: Path) -> None:
    torch.save(dict(values), path)


def _same_layout(ours: Mapping[str, torch.Tensor], theirs: Mapping[str, object]) -> bool:
    if ours.keys() != theirs.keys():
        return False
    for name, tensor in ours.items():
        other = theirs[name]
        if not isinstance(other, torch.Tensor) or (other.dtype, other.shape) != (tensor.dtype, tensor.shape):
            return False
    return True


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc; elsewhere a no-op): small tensors
    live in the heap, whose free pages otherwise stay resident."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def map_weights(module: torch.nn.Module, path: Path) -> bool:
    """Re-point ``module``'s state_dict tensors at ``path`` (written from them if absent), mapped.
    False, with the module untouched, when that cannot be done (a module that is not a plain
    ``nn.Module``, a state the file cannot hold, an unwritable cache): it then keeps its weights."""
    if isinstance(module, torch.jit.ScriptModule):
        return False
    try:
        values = module.state_dict()
        if not path.is_file():
            write_atomically(path, partial(_save, values))
        mapped = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
        if not _same_layout(values, mapped):
            log.warning("%s does not hold the weights it is named for; keeping them in memory", path)
            return False
        del values  # the last reference here to the tensors being replaced
        module.load_state_dict(mapped, strict=True, assign=True)
    except Exception as exc:  # noqa: BLE001 -- any failure costs memory, never the model
        log.warning("cannot move the torch weights out of memory into %s (%s); keeping them", path, exc)
        return False
    del mapped
    trim_heap()
    return True
