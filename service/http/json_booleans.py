"""JSON booleans among numbers: numpy reads ``[0.5, false]`` as ``[0.5, 0.0]`` (and ``[1, true]``
as ``[1, 1]``), so a tensor of numbers would take a boolean silently; JSON Schema's numbers
exclude booleans, and so does Triton. The walk that finds one is a Python pass over the values,
so it runs only on a body that can hold the literal: ``true`` has an ``r`` and ``false`` an
``l``, neither of which a JSON number or the ``"inputs"`` key has, and a one-byte search runs at
memchr speed (~0.2 ms on a 2.9 MB image body, against ~2 ms for each literal's own search).
"""

from __future__ import annotations


def may_hold_boolean(body: bytes | bytearray | memoryview, end: int | None = None) -> bool:
    """Whether ``body[:end]`` has a ``true`` or ``false`` literal, or may (strings in it can)."""
    if isinstance(body, memoryview):  # the lane's buffer of a binary body: the JSON before its data, copied
        body, end = body[:end].tobytes(), None
    if end is None or end == len(body):  # the operator, not find(): a µs less on a small body
        return (b"r" in body or b"l" in body) and (b"true" in body or b"false" in body)
    if body.find(b"r", 0, end) < 0 and body.find(b"l", 0, end) < 0:
        return False
    return body.find(b"true", 0, end) >= 0 or body.find(b"false", 0, end) >= 0


def mixes_booleans(value: object) -> bool:
    """Whether ``value``'s nested lists hold booleans and numbers both."""
    kinds: set[type] = set()
    _leaf_types(value, kinds)
    return bool in kinds and (int in kinds or float in kinds)


def _leaf_types(value: object, kinds: set[type]) -> None:
    if not isinstance(value, list):
        kinds.add(type(value))
        return
    here = set(map(type, value))
    if list in here:
        for item in value:
            _leaf_types(item, kinds)
        here.discard(list)
    kinds |= here
