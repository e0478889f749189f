"""The v2 protocol's tensor types, shared by its REST codec (service/v2/codec.py) and its gRPC
one (service/grpc/tensors.py): datatypes and their numpy dtypes, the check of a request's
tensor against the model's metadata, and the BYTES layout (each element a 4-byte little-endian
length, then its bytes, as Triton lays them out)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from inferpool.engine.client import Array
from inferpool.service.apierror import ApiError
from inferpool.service.timing import MIN_TIMEOUT_MS

DATATYPES = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "FP16": "float16", "FP32": "float32", "FP64": "float64",
}  # fmt: skip
V2_TYPES = {numpy: v2 for v2, numpy in DATATYPES.items()} | {"object": "BYTES"}
# Looked up by dtype object, never by ``dtype.name``: numpy builds that string in Python on every
# call, which made encoding a two-output response cost several times /predict's.
_V2_OF_DTYPE = {np.dtype(numpy): v2 for numpy, v2 in V2_TYPES.items()}
LITTLE = {v2: np.dtype(numpy).newbyteorder("<") for v2, numpy in DATATYPES.items()}
INT_RANGES = {
    v2: (int(info.min), int(info.max)) for v2, info in ((v2, np.iinfo(t)) for v2, t in LITTLE.items() if t.kind in "iu")
}
"""Each integer datatype's least and greatest value (``np.iinfo`` builds them anew each call)."""


UINT64_MAX = 2**64 - 1  # Triton's type for "timeout"
MIN_TIMEOUT_US = MIN_TIMEOUT_MS * 1000  # the header's least (inferpool.service.timing says why)


def bad(message: str) -> ApiError:
    return ApiError(400, message, "invalid_input")


def timeout_ms(timeout_us: int | None, given: str) -> float:
    """The "timeout" parameter (``timeout_us``, None when not an integer; ``given``: how it came,
    for the message), in ms: an integer of microseconds from MIN_TIMEOUT_US to UINT64_MAX."""
    if timeout_us is None or not MIN_TIMEOUT_US <= timeout_us <= UINT64_MAX:
        raise bad(
            f"parameter 'timeout' must be an integer of microseconds, {MIN_TIMEOUT_US} (1 ms) or more; got {given}"
        )
    return timeout_us / 1e3


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """What the model's v2 metadata declares of one input: a request's must match it."""

    datatype: str
    shape: tuple[int, ...]
    """-1 for a variable dimension."""
    _pick: Callable[[Sequence[int]], object] | None = field(init=False, repr=False, compare=False)
    """The fixed dimensions of a shape, in one C call (None: every dimension is variable)."""
    _fixed: object = field(init=False, repr=False, compare=False)
    """``_pick`` of ``shape``: what a request's shape must give."""

    def __post_init__(self) -> None:
        fixed = [at for at, size in enumerate(self.shape) if size != -1]
        pick = itemgetter(*fixed) if fixed else None
        object.__setattr__(self, "_pick", pick)
        object.__setattr__(self, "_fixed", None if pick is None else pick(self.shape))

    def fits(self, shape: Sequence[int]) -> bool:
        """Whether a request's ``shape`` is this one, each -1 taking any size."""
        pick = self._pick
        return len(shape) == len(self.shape) and (pick is None or pick(shape) == self._fixed)

    @classmethod
    def table(cls, tensors: list[dict[str, Any]]) -> dict[str, TensorMeta]:
        return {t["name"]: cls(t["datatype"], tuple(t["shape"])) for t in tensors}


def dims(shape: object) -> list[int] | None:
    """A "shape" (as orjson parsed it) as non-negative ints, or None when it is not one."""
    if not isinstance(shape, list):
        return None
    for value in shape:
        # Integers as JSON writes them: 1.0 is refused, as Triton refuses it (the spec's
        # integers, tests/e2e/service/test_fuzz.py, are generated and checked the same way).
        # orjson makes exact ints (never a subclass but bool, which this refuses too).
        if type(value) is not int or value < 0:
            return None
    return shape


def check_meta(name: str, datatype: str, shape: list[int], meta: TensorMeta) -> None:
    if datatype != meta.datatype:
        raise bad(f"input '{name}': datatype {datatype} is not the model's; send {meta.datatype} (nothing is cast)")
    if not meta.fits(shape):
        raise bad(f"input '{name}' has shape {shape}; the model takes {list(meta.shape)} (-1: any size)")


def split_bytes(name: str, raw: memoryview | bytes) -> list[bytes]:
    """A BYTES tensor's binary layout (each element a 4-byte little-endian length, then its
    bytes) -> its elements."""
    items: list[bytes] = []
    view, offset, end = memoryview(raw), 0, len(raw)
    while offset < end:
        if offset + 4 > end:
            raise bad(f"input '{name}': BYTES element {len(items)} has a truncated 4-byte length")
        length = int.from_bytes(view[offset : offset + 4], "little")
        if offset + 4 + length > end:
            raise bad(f"input '{name}': BYTES element {len(items)} runs past the end of its data")
        items.append(bytes(view[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    return items


def bytes_array(name: str, items: list[object], shape: list[int]) -> Array:
    """BYTES elements as an object array of ``shape``, or 400 when the count does not fit it."""
    numel = math.prod(shape)
    if len(items) != numel:
        raise bad(f"input '{name}': shape {shape} needs {numel} values, data has {len(items)}")
    array = np.empty(numel, dtype=object)
    array[:] = items
    return array.reshape(shape)


def join_bytes(array: Array) -> bytes:
    """An object array of bytes or strings in the BYTES binary layout."""
    items = [v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1).tolist()]
    return b"".join(len(v).to_bytes(4, "little") + v for v in items)


def v2_type(dtype: np.dtype[Any]) -> str:
    found = _V2_OF_DTYPE.get(dtype)  # native byte order; others (big-endian) by name
    return found if found is not None else V2_TYPES[dtype.name]
