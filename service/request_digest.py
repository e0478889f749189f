"""A request's key for the response cache (service/response_cache.py): what its route decoded,
as bytes that only an equal request gives.

Written out by pickle, not hashed into a digest: pickle writes floats, strings, lists, dicts and
dataclasses exactly and in C, so the bytes themselves are the key, and a dict look-up (one hash
of them, one compare on a hit) can never mistake one request for another. Past
``DIGEST_ABOVE`` bytes (an image, a long batch) the key is the BLAKE2b-256 digest of them
instead, so that a cache bounded by answer bytes is not filled by keys.

The cache's doorkeeper looks at a cheaper hash of the inputs first (``sighting``): a request
seen for the first time needs no key. An array's bytes are hashed as they are; a list of
integers or strings (JSON's inputs: ``/predict``'s, the text routes') is written by orjson, about
three times faster than pickle (64 integers: 0.4 µs against 1.2) and exact enough for a mark:
equal inputs write alike. A list of floats is pickled: orjson's shortest decimal form of each is
slower. The key is built in two parts:

- ``written_inputs``: the inputs. An array, or a dict of arrays (every v2 and gRPC request), is
  written as its dtype, shape and bytes: numpy's own pickling of an array takes microseconds
  (it names a function to rebuild it by), far more than the rest of the key. A tag in front
  says which form follows, so no other input can pose as an array.
- ``request_digest``: those bytes, then what the route's encoder is given besides the outputs
  (``decoded``: the v2 request's id and requested outputs, the embeddings request's format),
  where a reference to the inputs (the v2 request holds them) is written as one, not again,
  and a dataclass by its class's name and fields.

Two requests that decode alike but pickle differently (an object shared twice in one, equal
copies in the other) miss each other: a miss, never a wrong answer. Anything pickle cannot write
makes the request uncacheable (None).
"""

from __future__ import annotations

import io
import pickle
from hashlib import blake2b
from typing import Any

import numpy as np
import orjson

DIGEST_ABOVE = 4096
"""Keys longer than this are replaced by their 32-byte digest."""
_UNWRITABLE = (pickle.PicklingError, TypeError, AttributeError, ValueError)
# The forms of the inputs (the tag written first): one array, a dict of arrays, anything else.
_ARRAY, _ARRAYS, _OTHER = 0, 1, 2
# The forms of what the encoder is given: a dataclass by its fields, anything else as it is.
_FIELDS, _AS_IS = 0, 1


def _array_form(array: np.ndarray[Any, Any]) -> object:
    """An array's elements in C order; an array of objects (``BYTES``: str or bytes) by its
    elements, not their addresses. Written after its dtype (with its byte order) and shape."""
    return array.ravel().tolist() if array.dtype.hasobject else array.tobytes()


def written_inputs(inputs: object) -> bytes | None:
    """The first part of the key: the inputs, written out; None when they cannot be."""
    try:
        kind = type(inputs)
        if kind is np.ndarray:
            array: Any = inputs
            return pickle.dumps((_ARRAY, array.dtype.str, array.shape, _array_form(array)), protocol=5)
        if kind is dict:
            form: list[object] = [_ARRAYS]
            for name, value in inputs.items():  # type: ignore[attr-defined]
                if type(value) is not np.ndarray:
                    break
                form += (name, value.dtype.str, value.shape, _array_form(value))
            else:
                return pickle.dumps(form, protocol=5)
        return pickle.dumps((_OTHER, inputs), protocol=5)
    except _UNWRITABLE:
        return None


def sighting(inputs: object) -> int | None:
    """A hash of the inputs for the cache's doorkeeper, cheaper than ``written_inputs`` for an
    array or a dict of them (the doorkeeper only needs equal inputs to hash alike: a shared
    hash only keeps a request it need not have); None when they cannot be written out."""
    kind = type(inputs)
    if kind is dict:  # by the arrays' elements alone: names, dtypes and shapes are nearly always alike
        found = 0
        for value in inputs.values():  # type: ignore[attr-defined]
            if type(value) is not np.ndarray or value.dtype.hasobject:  # objects: by value, not address
                break
            found += hash(value.tobytes())
        else:
            return found
    elif kind is np.ndarray:
        array: Any = inputs
        if not array.dtype.hasobject:
            return hash(array.tobytes())
    elif kind is list:
        first: object = inputs
        while type(first) is list and first:
            first = first[0]
        if type(first) is not float:  # orjson writes floats more slowly than pickle (1.6 µs to 1.3 for 64)
            try:
                return hash(orjson.dumps(inputs))
            except orjson.JSONEncodeError:  # beyond JSON's types (an array inside, a huge integer): pickled
                pass
    written = written_inputs(inputs)
    return None if written is None else hash(written)


_NOTHING_DECODED = pickle.dumps(None, protocol=5)


def request_digest(inputs: object, decoded: object = None, written: bytes | None = None) -> bytes | None:
    """The key of a request of ``inputs`` (``written``: ``written_inputs`` of them, when made
    already) and ``decoded`` (what its encoder is given besides the outputs); None when they
    cannot be written out faithfully."""
    if written is None:
        written = written_inputs(inputs)
        if written is None:
            return None
    if decoded is None:
        rest = _NOTHING_DECODED
    else:
        file = io.BytesIO()
        pickler = pickle.Pickler(file, protocol=5)
        # The inputs, already written first, are the memo's entry 0: a reference to them in
        # ``decoded`` is written as that reference. Memo indices past it are pickle's own.
        pickler.memo = {id(inputs): (0, inputs)}
        kind = type(decoded)
        if hasattr(kind, "__dataclass_fields__") and not hasattr(kind, "__slots__"):
            # A dataclass (the v2 request) by its class's name and its fields, all in its
            # __dict__: pickle's own way looks the class up by name, more than the rest costs.
            decoded = (_FIELDS, kind.__module__, kind.__qualname__, vars(decoded))
        else:
            decoded = (_AS_IS, decoded)
        try:
            pickler.dump(decoded)
        except _UNWRITABLE:
            return None
        rest = file.getvalue()
    # Each part is a whole pickle (it ends at its STOP), so where one ends is never in doubt.
    key = written + rest
    if len(key) > DIGEST_ABOVE:
        return blake2b(key, digest_size=32).digest()
    return key
