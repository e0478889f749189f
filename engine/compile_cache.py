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
import uuid
from collections.abc import Callable, Iterable
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


def content_key(parts: Iterable[bytes | str]) -> str:
    """A hex digest over ``parts`` (length-prefixed, so parts cannot run into each other)."""
    digest = hashlib.sha256(machine_fingerprint().encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:KEY_CHARS]


def write_atomically(path: Path, produce: Callable[[Path], None]) -> None:
    """Let ``produce`` write a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp{path.suffix}")
    try:
        produce(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
