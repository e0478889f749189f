"""Where the lane reads a request body (``LaneBody``): a bytearray that grows, or, for a body with
binary tensor data, one buffer of the declared length, taken once its head is in, the data's
first byte on a 64-byte boundary.

A body read as a list of chunks is joined (one copy of 600 KB for a ResNet-50 image), and the
v2 binary data then starts wherever the client's JSON header ends: misaligned for its datatype
three times in four, which numpy reads without SIMD (the engine's finite check on a ResNet-50
image: 400-480 µs against 16 aligned), so the codec copies it once more (service/v2/codec.py).
Filled in place instead, the codec's ``np.frombuffer`` is a view of the bytes as they arrived and
the engine reads that view (OpenVINO with ``share_inputs``).

The buffers are reused: a fresh 600 KB allocation is fresh pages from the kernel, each zeroed at
its first write, and with 16 connections' bodies in flight that cost ~200 µs a body against
~20 µs for writing into pages already mapped. A buffer goes back to the free list when its
request is answered and is taken again only if nothing still views it (an engine call that
outlived its request, a batch that still holds it): its reference count says so.
numpy's ``empty`` rather than ``bytearray(n)``: the bytearray zeroes its bytes first.
"""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt

ALIGNMENT = 64
"""A cache line, and a multiple of every datatype's size (the engine's own buffers use the same)."""
SMALLEST = 64 * 1024
"""A smaller body is read into a bytearray as before: its misaligned copy costs less than a
buffer's bookkeeping, and it is read in one or two pieces anyway."""
SIZE_STEP = 64 * 1024
"""Buffers come in multiples of this, so that bodies of nearly the same size share them."""
KEEP_BYTES = 32 * 1024 * 1024
"""The most a process keeps in free buffers: 50 ResNet-50 images' bodies."""
_UNVIEWED = 2
"""``sys.getrefcount`` of a buffer that only the caller's name refers to (and the call's argument)."""


class BodyBuffers:
    """A process's free list of body buffers, by size."""

    def __init__(self, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self.kept = 0
        self._free: dict[int, list[npt.NDArray[np.uint8]]] = {}

    def take(self, length: int, data_offset: int) -> memoryview:
        """A writable buffer of ``length`` bytes whose byte ``data_offset`` is ``ALIGNMENT``-aligned."""
        size = -(-(length + ALIGNMENT) // SIZE_STEP) * SIZE_STEP
        free = self._free.get(size)
        raw = None
        while free:
            candidate = free.pop()
            self.kept -= size
            if sys.getrefcount(candidate) == _UNVIEWED:
                raw = candidate
                break
        if raw is None:
            raw = np.empty(size, dtype=np.uint8)
        start = -(raw.ctypes.data + data_offset) % ALIGNMENT
        return raw[start : start + length].data

    def give_back(self, body: memoryview) -> None:
        """``body``'s buffer (one ``take`` gave), free again once nothing views it."""
        raw = getattr(body.obj, "base", None)  # the view's base: the whole buffer
        if not isinstance(raw, np.ndarray) or self.kept + raw.nbytes > self.keep_bytes:
            return
        self._free.setdefault(raw.nbytes, []).append(raw)
        self.kept += raw.nbytes


class LaneBody:
    """A lane request's body as it arrives (service/http/protocol.py feeds it): ``data`` is what
    the route decodes once it is all in."""

    __slots__ = ("data", "filled")

    def __init__(self, data: bytearray | memoryview) -> None:
        self.data = data
        self.filled = 0

    @classmethod
    def of(cls, buffers: BodyBuffers, length: int, data_offset: int | None) -> LaneBody:
        """A body of ``length`` bytes, its binary data (if any, and only past ``SMALLEST``: the
        caller's check) at ``data_offset``."""
        if data_offset is None:
            return cls(bytearray())
        return cls(buffers.take(length, data_offset))

    def fill(self, chunk: bytes) -> None:
        """The parser's next piece of it."""
        data = self.data
        if type(data) is bytearray:
            data += chunk
            return
        filled = self.filled
        end = self.filled = filled + len(chunk)
        data[filled:end] = chunk

    def fill_directly(self, read: bytes) -> int:
        """The rest of a taken buffer, from a socket read that bypasses the parser (which would copy
        each piece into a bytes object of its own first: 600 KB more copied per ResNet-50 image):
        how many of ``read``'s bytes were its (the rest is the next request)."""
        data = self.data
        filled = self.filled
        taken = min(len(read), len(data) - filled)
        end = self.filled = filled + taken
        data[filled:end] = read if taken == len(read) else memoryview(read)[:taken]
        return taken

    def waiting(self) -> bool:
        """Whether it is a taken buffer not yet full: what ``fill_directly`` fills."""
        data = self.data
        return type(data) is memoryview and self.filled < len(data)

    def give_back(self, buffers: BodyBuffers) -> None:
        """Its buffer, if it took one, for a later body once nothing views this one's arrays."""
        data = self.data
        if type(data) is memoryview:
            self.data = bytearray()
            buffers.give_back(data)
