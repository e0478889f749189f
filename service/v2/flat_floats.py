"""A v2 JSON input's ``data`` as a float array in one C call, for the common request: a flat list
of JSON numbers for an FP32 or FP64 input.

The general way (service/v2/codec.py, ``_json_data``) lets numpy discover the list's type
(``np.asarray``: float64 for numbers with a fraction), checks what it found, then casts to FP32
under ``np.errstate`` to catch a value beyond FP32's range: on the digits model's 64 values
~6.5 µs a request, two thirds of the codec's decode after ``orjson.loads``. ``struct`` packs the
same list straight into the array's bytes and refuses, by raising, everything the general way
refuses: a value that is no number (a string, null, a nested list: ``struct.error``) and one too
large for the type (``OverflowError``). Then the general way runs instead and answers with its
own words, so a bad request gets the same 400 either way. What struct would take and the general
way would not: JSON booleans (True packs as 1.0), so the caller leaves a body that may hold one
to the general way (service/http/json_booleans.py).

The values are the same: a number is rounded to the nearest FP32 from its double, as numpy's cast
from float64 rounds it. (An all-integer list numpy reads as int64 and casts once; an integer
beyond 2**53 can then round one FP32 step apart. JSON's numbers are doubles to most clients.)
"""

from __future__ import annotations

import struct

import numpy as np

from inferpool.engine.client import Array

_FORMATS = {"FP32": "f", "FP64": "d"}
"""The datatypes packed this way, by struct's letter. FP16 ('e') is left to numpy's cast."""
_MOST_PACKERS = 64
"""Packers kept per datatype (one per list length seen): a client sends a few lengths."""
_packers: dict[tuple[str, int], struct.Struct] = {}


def flat_floats(data: object, datatype: str, count: int) -> Array | None:
    """``data`` as a flat array of ``count`` values of ``datatype``, or None when it is not a flat
    list of that many JSON numbers within the type's range (or the datatype is not packed here):
    the caller's general way then decodes it, or says what is wrong with it."""
    if type(data) is not list or len(data) != count or datatype not in _FORMATS:
        return None
    packer = _packers.get((datatype, count))
    if packer is None:
        if len(_packers) >= _MOST_PACKERS * len(_FORMATS):
            _packers.clear()  # a client sending ever new lengths: no table grows without bound
        packer = _packers[datatype, count] = struct.Struct(f"<{count}{_FORMATS[datatype]}")
    array: Array = np.empty(count, dtype=np.float32 if datatype == "FP32" else np.float64)
    try:
        packer.pack_into(array.data, 0, *data)
    except (struct.error, OverflowError, TypeError):  # not a number, or beyond the type's range
        return None
    return array
