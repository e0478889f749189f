"""A cache key over a model's weights that does not make mapped weights resident.

Weights loaded memory-mapped (safetensors through transformers, ``torch.load(mmap=True)``) are
resident only where something has read them; eager inference reads few rows of an embedding
table, but hashing them for a cache key reads every byte, and each page it touches then counts
in the process's RSS for as long as the mapping lives (most of MiniLM's token table: figures
in docs/BENCHMARKS.md, "Weights once (issue 22)"). So a tensor that is a plain run of bytes in
a file mapping, none of its pages modified in memory (``/proc/self/pagemap``: no page private,
none swapped), is hashed from the file with ``pread``: the same bytes, through the page cache,
which counts in no one's RSS.
Anything else is hashed in memory, as ``inferpool.engine.compile_cache.named_value_parts`` does; the key
is the same either way (``content_key``'s encoding, a file part read in chunks).
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from inferpool.engine.compile_cache import KEY_CHARS, machine_fingerprint, named_value_parts

CHUNK = 1 << 20


@dataclass(frozen=True)
class FileBytes:
    """``length`` bytes of ``path`` from ``offset``: a key part read from the file, not the mapping."""

    path: str
    offset: int
    length: int

    def chunks(self) -> Iterator[bytes]:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            done = 0
            while done < self.length:
                chunk = os.pread(fd, min(CHUNK, self.length - done), self.offset + done)
                if not chunk:
                    raise OSError(f"{self.path} ended before byte {self.offset + self.length}")
                done += len(chunk)
                yield chunk
        finally:
            os.close(fd)


FileMapping = tuple[int, int, int, str]  # start, end, file offset, path


def _file_mappings() -> list[FileMapping]:
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or fields[4] == "0" or not fields[5].startswith("/") or fields[5].endswith("(deleted)"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            found.append((start, end, int(fields[2], 16), fields[5].rstrip("\n")))
    return found


def _unmodified(start: int, length: int) -> bool:
    """No page of the range is a private copy or swapped: every byte is still the file's."""
    first, last = start // mmap.PAGESIZE, (start + length - 1) // mmap.PAGESIZE
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((last - first + 1) * 8), dtype="<u8")
    present, swapped, from_file = (entries >> 63) & 1, (entries >> 62) & 1, (entries >> 61) & 1
    return len(entries) == last - first + 1 and not swapped.any() and not (present & (1 - from_file)).any()


def _file_span(tensor: torch.Tensor, mappings: list[FileMapping]) -> FileBytes | None:
    if tensor.device.type != "cpu" or not tensor.is_contiguous() or tensor.numel() == 0:
        return None
    start, length = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    for low, high, offset, path in mappings:
        if low <= start and start + length <= high:
            return FileBytes(path, offset + start - low, length) if _unmodified(start, length) else None
    return None


def value_parts(values: Mapping[str, object]) -> Iterator[memoryview | str | FileBytes]:
    """``named_value_parts``, with the bytes of tensors mapped unmodified from a file as FileBytes."""
    try:
        mappings = _file_mappings()
    except OSError:
        mappings = []
    for name in sorted(values):
        value = values[name]
        span = _span_or_none(value, mappings) if isinstance(value, torch.Tensor) and mappings else None
        if span is None:
            yield from named_value_parts({name: value})
        else:
            yield f"{name}:{span[0].dtype}:{tuple(span[0].shape)}"
            yield span[1]


def _span_or_none(tensor: torch.Tensor, mappings: list[FileMapping]) -> tuple[torch.Tensor, FileBytes] | None:
    try:
        span = _file_span(tensor.detach(), mappings)
    except OSError:
        return None
    return None if span is None else (tensor, span)


def content_key(parts: Iterable[bytes | memoryview | str | FileBytes]) -> str:
    """``inferpool.engine.compile_cache.content_key`` over parts that may be FileBytes (the same key for
    the same bytes, wherever they are read from)."""
    digest = hashlib.sha256(machine_fingerprint().encode())
    for part in parts:
        if isinstance(part, FileBytes):
            digest.update(part.length.to_bytes(8, "little"))
            for chunk in part.chunks():
                digest.update(chunk)
            continue
        data = memoryview(part.encode() if isinstance(part, str) else part).cast("B")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:KEY_CHARS]
