"""The common v2 answer (every output as JSON ``data``, no ``id``) joined from pieces made once.

``encode_response`` (service/v2/codec.py) builds a dict per output (its name, datatype, shape
and data) and the envelope around them, and has orjson write all of it: for the digits model's
two outputs ~3.4 µs, more than half of it the dicts and the lookups that fill them. What changes
from one answer to the next is only the data: the rest is the same bytes for the same model,
output name, dtype and shape. Here those bytes are made once and kept, and orjson writes each
output's array alone; the answer is byte for byte what ``encode_response`` writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import numpy as np
import orjson

from inferpool.engine.client import Array
from inferpool.service.v2.datatypes import v2_type

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_MOST_KEPT = 256
"""Pieces kept (a shape a batch size: a client decides how many): past it, made anew."""
K = TypeVar("K")
_envelopes: dict[tuple[str, str], bytes] = {}
_entries: dict[tuple[str, np.dtype[np.generic], tuple[int, ...]], bytes] = {}


def json_answer(model: str, version: str, outputs: Mapping[str, Array]) -> bytes | None:
    """The answer of ``model`` at ``version`` with every one of ``outputs`` as JSON data, or
    None for outputs it does not write (none at all, strings, anything not an array): the
    caller's general way writes those."""
    if not outputs:
        return None
    envelope = _envelopes.get((model, version))
    if envelope is None:
        envelope = _kept(_envelopes, (model, version), _opening(model, version))
    parts = [envelope]
    for name, array in outputs.items():
        if type(array) is not np.ndarray:
            return None
        dtype = array.dtype
        entry = _entries.get((name, dtype, array.shape))
        if entry is None:
            if dtype.kind not in "biuf":
                return None  # BYTES (strings), and anything orjson writes otherwise
            entry = _kept(_entries, (name, dtype, array.shape), _entry(name, v2_type(dtype), array.shape))
        parts += (entry, orjson.dumps(array.ravel(), option=_NUMPY), b"},")
    parts[-1] = b"}]}"
    return b"".join(parts)


def _opening(model: str, version: str) -> bytes:
    """``{"model_name":...,"model_version":...,"outputs":[``, as orjson writes the dict."""
    return orjson.dumps({"model_name": model, "model_version": version})[:-1] + b',"outputs":['


def _entry(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    """An output's object up to its data: ``{"name":...,"datatype":...,"shape":[...],"data":``."""
    return orjson.dumps({"name": name, "datatype": datatype, "shape": list(shape)})[:-1] + b',"data":'


def _kept(table: dict[K, bytes], key: K, piece: bytes) -> bytes:
    if len(table) >= _MOST_KEPT:
        table.clear()
    table[key] = piece
    return piece
