"""The response cache: a repeated request answered with the bytes its first answer had, before
admission, with no queue and no model call (Triton's ``response_cache``).

One per serving process (a least-recently-used map bounded by the bytes of the answers it holds),
consulted by the front door for every route that hands it a request (service/frontdoor.py), so
that a route needs no code of its own for it. An entry's key is:

- four bytes that stand for the model's record and the route's encoder (the front door gives
  each pair its own): the record (``Served``) is one per model version, so no answer crosses
  models or versions. A serving process's models never change: a load, unload or version swap
  replaces the processes (service/processes/model_swap.py), and a new process starts with an
  empty cache. ``/predict``, v2 JSON or binary, gRPC and ``/v1/embeddings`` encode the same
  outputs differently, hence the encoder;
- the decoded inputs, and what that encoder is given besides the outputs (the v2 request's id
  and requested outputs, the embeddings request's format and dimensions), written out exactly
  (request_digest.py).

What is cached is the encoder's own product, the answer's body, so a hit is byte-identical to
the answer it repeats. Off (``response_cache_mb = 0``), no request builds a key.

For a cheap model (a call under ``DOORKEEPER_UNDER_MS``, service/cache_look.py) a request is
kept only once it is seen again (the ``Doorkeeper``, TinyLFU's): the first request of its inputs
only leaves a mark, the second is kept, the third and later hit. A dearer model's are kept at once. Traffic
without repeats then costs the cache one look at the mark a request, no key, no entry: it
churns neither the LRU nor the garbage collector's generations (an entry is plain bytes, keys
and bodies, which the collector does not follow).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

MB = 1024 * 1024
Key = bytes
"""The model's and encoder's four bytes, then the request's decoded inputs and parameters."""


def size_of(answer: object) -> int | None:
    """The bytes an answer holds: a body, a (body, header length) pair, a protobuf message; None
    for anything else (not cached: its size cannot be bounded)."""
    if isinstance(answer, bytes | bytearray):
        return len(answer)
    if isinstance(answer, tuple):
        sizes = [size_of(part) if isinstance(part, bytes | bytearray | tuple) else 8 for part in answer]
        return None if None in sizes else sum(s for s in sizes if s is not None)
    byte_size = getattr(answer, "ByteSize", None)
    return int(byte_size()) if callable(byte_size) else None


class ResponseCache:
    """Answers by key, evicting the least recently used first once they hold more than
    ``max_bytes``. Thread-safe (gRPC's and the event loop's callers); the lock is uncontended
    in a serving process, whose requests all run on its event loop."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.doorkeeper = Doorkeeper()
        self.bytes = 0
        """What the answers held take (their bodies' and keys' sizes), at most ``max_bytes``."""
        self._entries: OrderedDict[Key, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def of_megabytes(cls, megabytes: float) -> ResponseCache | None:
        """The cache ``response_cache_mb`` asks for; None when it is 0 (off)."""
        return cls(int(megabytes * MB)) if megabytes > 0 else None

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> Any | None:
        """The answer held for ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Key, answer: object) -> bool:
        """Hold ``answer`` for ``key``, evicting the least recently used as needed; False when it
        is not held (larger than the whole cache, or of no known size)."""
        size = size_of(answer)
        if size is None:
            return False
        size += len(key)  # the key is held too (at most request_digest.DIGEST_ABOVE bytes and 4)
        if size > self.max_bytes:
            return False
        with self._lock:
            entries = self._entries
            old = entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            entries[key] = (answer, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = entries.popitem(last=False)
                self.bytes -= evicted
        return True


_BITS = 1 << 21
_SLOTS = _BITS - 1
# A slot's two bits, side by side in one byte (four slots a byte): this generation's mark (the
# low bit) and the last one's (the high bit). Turning a generation moves each low bit up.
_TURN = bytes((value & 0b01010101) << 1 for value in range(256))


class Doorkeeper:
    """Which requests were seen lately, by a hash of their inputs: marks in a bit table, two
    generations of ``WINDOW`` marks each, so that a request is remembered for 65,536 to 131,072
    sightings of others (a repeated one, each hit renewing its mark, for as long as it repeats).
    A request that leaves a new mark is not kept; one whose mark is there was seen before and
    is. At most a 32nd of a generation's bits are set, so a new request finds its slot taken by
    another's in under 6 % of cases: one more entry kept, never a wrong answer. (Four times the
    bits, for about 1 %, made each look slower amid a request: docs/traffic.md.)

    A slot's mark in both generations is in one byte: a look reads one place in memory, not one
    in each generation's table (each a likely cache miss amid a request).

    Without a lock: under races a mark can be lost or a generation turned twice, which only
    changes which requests are kept."""

    BITS = _BITS
    """Slots a generation has (both generations: 512 KB)."""
    WINDOW = BITS // 32

    def __init__(self) -> None:
        self._marks = bytearray(self.BITS // 4)
        self._count = 0

    def first_sighting(self, sighting: int) -> bool:
        """Whether the request of hash ``sighting`` is new, or was seen before; marked now."""
        slot = sighting & _SLOTS
        byte, mark = slot >> 2, 1 << ((slot & 3) << 1)
        marks = self._marks
        both = marks[byte]
        if both & mark:
            return False
        marks[byte] = both | mark
        self._count += 1
        if self._count >= self.WINDOW:  # this generation becomes the last one, in C over the table
            self._marks, self._count = marks.translate(_TURN), 0
        return not both & (mark << 1)
