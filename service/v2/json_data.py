"""A v2 JSON input's ``data`` as an array of its datatype: the common flat list of numbers for an
FP32 or FP64 input packed in one C call, anything else the general way.

The general way lets numpy discover the list's type (``np.asarray``: float64 for numbers with a
fraction), checks what it found, then casts, to FP32 under ``np.errstate`` to catch a value
beyond FP32's range: on the digits model's 64 values 3-4 µs a request, more than ``orjson.loads``
of the whole body. ``struct`` packs the same list straight into the array's bytes and refuses, by
raising, everything the general way refuses: a value that is no number (a string, null, a nested
list: ``struct.error``) and one too large for the type (``OverflowError``). Then the general way
runs instead and answers with its own words, so a bad request gets the same 400 either way. What
struct would take and the general way would not: JSON booleans (True packs as 1.0), so a body
that may hold one goes the general way (service/http/json_booleans.py).

The values are the same: a number is rounded to the nearest FP32 from its double, as numpy's cast
from float64 rounds it. (An all-integer list numpy reads as int64 and casts once; an integer
beyond 2**53 can then round one FP32 step apart. JSON's numbers are doubles to most clients.)
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from inferpool.engine.client import Array
from inferpool.service.http.json_booleans import mixes_booleans
from inferpool.service.v2.datatypes import INT_RANGES, LITTLE, bad

# The kinds of JSON data (as numpy infers them) each datatype's kind takes: JSON numbers widen
# to floats, but nothing else is cast (Triton refuses true for FP32 and 1.5 for INT64 alike).
_JSON_KINDS = {"f": "fiu", "i": "iu", "u": "iu", "b": "b"}
_JSON_NAMES = {"f": "numbers", "i": "integers", "u": "non-negative integers", "b": "booleans"}
# orjson reads integers beyond 64 bits as floats, hence "or beyond 64 bits".
_LEAF_KINDS = {"b": "booleans", "f": "numbers with a fraction, an exponent or beyond 64 bits", "i": "integers"}

_FORMATS = {"FP32": "f", "FP64": "d"}
"""The datatypes packed this way, by struct's letter. FP16 ('e') is left to numpy's cast."""
_MOST_PACKERS = 64
"""Packers kept per datatype (one per list length seen): a client sends a few lengths."""
_packers: dict[tuple[str, int], struct.Struct] = {}


def flat_floats(data: object, datatype: str, count: int, shape: list[int] | None = None) -> Array | None:
    """``data`` as an array of ``count`` values of ``datatype`` (flat, or of ``shape``, which holds
    ``count``: made in that shape, not reshaped after), or None when it is not a flat list of that
    many JSON numbers within the type's range (or the datatype is not packed here): the caller's
    general way then decodes it, or says what is wrong with it."""
    if type(data) is not list or len(data) != count or datatype not in _FORMATS:
        return None
    packer = _packers.get((datatype, count))
    if packer is None:
        if len(_packers) >= _MOST_PACKERS * len(_FORMATS):
            _packers.clear()  # a client sending ever new lengths: no table grows without bound
        packer = _packers[datatype, count] = struct.Struct(f"<{count}{_FORMATS[datatype]}")
    array: Array = np.empty(count if shape is None else shape, dtype=LITTLE[datatype])  # little-endian, as packed
    try:
        # The array itself: numpy exports a writable C-contiguous buffer (its stubs do not say so).
        packer.pack_into(array, 0, *data)  # type: ignore[arg-type]
    except (struct.error, OverflowError, TypeError):  # not a number, or beyond the type's range
        return None
    return array


def json_data(name: str, data: object, datatype: str, count: int, booleans: bool = True) -> Array:
    """Input ``name``'s JSON ``data`` as a ``datatype`` array (flat when packed: the caller checks
    its size and gives it its shape), or a 400 saying what is wrong with it; ``count``: the values
    its shape takes; ``booleans``: the body may hold a true or false."""
    packed = None if booleans else flat_floats(data, datatype, count)
    return _general(name, data, datatype, booleans) if packed is None else packed


def _general(name: str, data: object, datatype: str, booleans: bool = True) -> Array:
    """JSON ``data`` (flat or nested) as a ``datatype`` array, refusing values of another
    JSON type (true for FP32, 1.5 for INT64, null, strings) instead of casting them;
    ``booleans``: the request may hold a true or false (only then are numbers checked for one)."""
    dtype = LITTLE[datatype]
    try:
        array = np.asarray(data)  # its inferred kind says what JSON types the leaves were
    except (ValueError, TypeError, OverflowError) as exc:
        raise bad(f"input '{name}': data is not a rectangular list of {datatype} values ({exc})") from None
    if array.size and array.dtype.kind not in _JSON_KINDS[dtype.kind]:
        raise bad(f"input '{name}': {datatype} data must be JSON {_JSON_NAMES[dtype.kind]}; got {_leaves(array)}")
    if booleans and dtype.kind != "b" and array.dtype.kind in "fiu" and mixes_booleans(data):
        raise bad(f"input '{name}': {datatype} data must be JSON {_JSON_NAMES[dtype.kind]}; got true/false among them")
    if dtype.kind in "iu":
        if array.size:
            low, high = INT_RANGES[datatype]
            if array.min() < low or array.max() > high:
                raise bad(f"input '{name}': data has values out of range for {datatype} [{low}, {high}]")
        return array.astype(dtype, copy=False)  # in range: exact
    if not _may_overflow(array.dtype, dtype):
        return array.astype(dtype, copy=False)
    try:
        with np.errstate(over="raise"):
            return array.astype(dtype, copy=False)
    except FloatingPointError:
        raise bad(f"input '{name}': data has values out of range for {datatype}") from None


def _may_overflow(source: np.dtype[Any], target: np.dtype[Any]) -> bool:
    """Whether casting numbers of ``source`` (as numpy read JSON data: bool, int64, uint64,
    float64) to the float or bool ``target`` can overflow: to a narrower float, or integers to
    float16. Only then is the cast made under ``np.errstate`` (~2 µs a request)."""
    if target.kind != "f":
        return False
    return target.itemsize < source.itemsize if source.kind == "f" else target.itemsize == 2


def _leaves(array: Array) -> str:
    """What JSON data numpy inferred ``array`` from, for messages."""
    return _LEAF_KINDS.get(array.dtype.kind.replace("u", "i"), "nulls, strings, mixed values or numbers out of range")
