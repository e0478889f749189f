"""Where compiled artifacts live: a directory of files named by a content hash, written atomically.

A restart finds the artifact its inputs hash to and does not recompile. The hash covers
whatever the caller says the artifact depends on, plus this machine's fingerprint (the
compiler targets the CPU it runs on, ``-march=native``, so an artifact from another CPU could
crash with an illegal instruction). Writes go to a temporary file that is renamed into place,
so concurrent starts never read a half-written artifact: the last rename wins, and both
renamed files are complete.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import torch

KEY_CHARS = 20  # 80 bits of sha256: collisions are not a practical concern for a cache


def cache_dir(configured: str = "") -> Path:
    """``configured``, or ``$XDG_CACHE_HOME/inferpool`` (``~/.cache/inferpool``)."""
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inferpool"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        return ""


def machine_fingerprint() -> str:
    """What compiled code depends on besides its inputs: torch, the ISA and the CPU's flags."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"torch={torch.__version__} arch={platform.machine()} isa={capability} {_cpu_flags()}"


def content_key(parts: Iterable[bytes | memoryview | str]) -> str:
    """A hex digest over ``parts`` (length-prefixed, so parts cannot run into each other).
    A part may be a memoryview (of a tensor's bytes): hashed in place, not copied."""
    digest = hashlib.sha256(machine_fingerprint().encode())
    for part in parts:
        data = memoryview(part.encode() if isinstance(part, str) else part).cast("B")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:KEY_CHARS]


def tensor_parts(program: torch.export.ExportedProgram) -> Iterator[memoryview | str]:
    """Key parts for an exported program's every weight, buffer and constant."""
    return named_value_parts({**program.state_dict, **program.constants})


def named_value_parts(values: Mapping[str, object]) -> Iterator[memoryview | str]:
    """Key parts for named tensors (and other values): name, dtype, shape and bytes (viewed, not
    copied: a copy would add the largest weight to the peak RSS)."""
    for name in sorted(values):
        value = values[name]
        if isinstance(value, torch.Tensor):
            flat = value.detach().contiguous().reshape(-1)
            yield f"{name}:{value.dtype}:{tuple(value.shape)}"
            yield flat.view(torch.uint8).numpy().data if flat.numel() else memoryview(b"")
        else:
            yield f"{name}:{value!r}"


def artifact_path(directory: Path, name: str, key: str, suffix: str) -> Path:
    """``directory/<name>-<key><suffix>``, the model name made safe for a file name."""
    return directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{key}{suffix}"


def write_atomically(path: Path, produce: Callable[[Path], None]) -> None:
    """Let ``produce`` write a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp{path.suffix}")
    try:
        produce(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
