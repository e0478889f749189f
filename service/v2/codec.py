"""Open Inference Protocol v2 bodies, JSON and the binary tensor data extension.

Binary inputs are *viewed*, not parsed: ``np.frombuffer`` over the request body (a bytearray, or
the lane's aligned buffer: writable either way, so torch takes the view without a copy), after
checking that datatype, shape and byte count agree; copied once only when the view would be
misaligned. Binary
outputs are the runtime's arrays' own bytes appended to the response. This is the HTTP
counterpart of AOTInductor's ArrayRef interface.

``BYTES`` tensors (text, for models with a handler: inferpool.engine.models.handlers) are object arrays of
``bytes``: in JSON a list of strings, in binary each element a 4-byte little-endian length and
then its bytes, as Triton lays them out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import orjson

from inferpool.engine.client import Array, Handler, Schema
from inferpool.service.http.json_booleans import may_hold_boolean
from inferpool.service.v2.datatypes import (
    DATATYPES,
    LITTLE,
    V2_TYPES,
    TensorMeta,
    bad,
    bytes_array,
    check_meta,
    dims,
    join_bytes,
    split_bytes,
    timeout_ms,
    v2_type,
)
from inferpool.service.v2.json_answer import json_answer
from inferpool.service.v2.json_common import common_inputs
from inferpool.service.v2.json_data import json_data

HEADER_LENGTH = "inference-header-content-length"
VERSION = "1"  # the version of the config's models; a repository's have their folders' numbers
_JSON_TYPES = {
    bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object",
}  # fmt: skip
Body = bytearray | memoryview
"""A request body: read by the ASGI path, or into the lane's aligned buffer (service/http/body_buffer.py)."""
# Longer than any length a body can have: int() of a longer digit string is refused (or slow).
_MAX_LENGTH_DIGITS = 19


@dataclass
class InferRequest:
    inputs: dict[str, Array]
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, bool] | None = None
    """Requested outputs -> binary? ``None`` = all outputs."""
    binary_output: bool = False
    timeout_ms: float | None = None
    """The "timeout" parameter (sent in µs, as Triton's clients do)."""


def parse_request(
    body: Body, header_length: str | None, expected: Mapping[str, TensorMeta] | None = None
) -> InferRequest:
    """``expected``: the model's inputs (metadata); an input of another datatype or shape is
    refused, as Triton does, instead of being cast. Inputs it does not name are left to the
    engine, which names every input the model takes."""
    json_end = len(body)
    if header_length is not None:
        # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses.
        digits = header_length.isascii() and header_length.isdigit() and len(header_length) <= _MAX_LENGTH_DIGITS
        if not digits or int(header_length) > len(body):
            raise bad(f"Inference-Header-Content-Length {header_length!r} is not a length within the body")
        # 0 is "no binary data", as in Triton: the whole body is the JSON (the spec's minimum).
        json_end = int(header_length) or len(body)
    try:
        header = orjson.loads(body if json_end == len(body) else memoryview(body)[:json_end])
    except orjson.JSONDecodeError as exc:
        raise bad(f"inference request header is not valid JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise bad('inference request must be a JSON object with an "inputs" list')
    # service/http/json_booleans.py says why; its first test inline (not on the lane's buffer of a
    # binary body, a memoryview, whose ``in`` compares items), as most bodies end there, without a call.
    booleans = (type(body) is memoryview or b"r" in body or b"l" in body) and may_hold_boolean(body, json_end)
    if len(header) == 1 and expected and not booleans and json_end == len(body):
        common = common_inputs(header["inputs"], expected)  # just "inputs", all JSON: in fewer steps
        if common is not None:
            return InferRequest(common)
    parameters = _object(header["parameters"], "parameters") if "parameters" in header else {}
    offset, inputs = json_end, {}
    for tensor in header["inputs"]:
        name, array, offset = _input(_object(tensor, "each input"), body, offset, expected or {}, booleans)
        if name in inputs:
            raise bad(f"input '{name}' is given twice; send each input once")
        inputs[name] = array
    if offset != len(body):
        raise bad(f"the body has {len(body) - offset} bytes beyond the binary inputs it declares")
    outputs = None
    if "outputs" in header:  # null too is not a list: the spec says a list, when given
        requested = header["outputs"]
        if not isinstance(requested, list):
            raise bad('"outputs" must be a list')
        outputs = {}
        for item in requested:
            out = _object(item, "each requested output")
            out_name = out.get("name")
            if not isinstance(out_name, str):
                raise bad("each requested output needs a string 'name'")
            out_parameters = _object(out.get("parameters", {}), f"output '{out_name}' parameters")
            outputs[out_name] = _flag(out_parameters, "binary_data", f"output '{out_name}' parameter")
    request_id = header.get("id")
    if "id" in header and not isinstance(request_id, str):
        raise bad(f"'id' must be a string; got {_kind(request_id)}")
    if not parameters:  # the common request: nothing more to read
        return InferRequest(inputs, request_id, parameters, outputs)
    return InferRequest(
        inputs,
        id=request_id,
        parameters=parameters,
        outputs=outputs,
        binary_output=_flag(parameters, "binary_data_output", "parameter"),
        timeout_ms=_timeout_ms(parameters),
    )


def _flag(parameters: Mapping[str, Any], key: str, what: str) -> bool:
    value = parameters.get(key, False)
    if not isinstance(value, bool):
        raise bad(f"{what} '{key}' must be true or false; got {_kind(value)}")
    return value


def _timeout_ms(parameters: Mapping[str, Any]) -> float | None:
    """The "timeout" parameter: an integer of microseconds (Triton's type for it), 1 ms or more."""
    if "timeout" not in parameters:  # null is not an integer: refused below
        return None
    timeout_us = parameters["timeout"]
    return timeout_ms(whole_number(timeout_us), repr(timeout_us))


def whole_number(value: object) -> int | None:
    """A JSON integer as JSON Schema counts them (2500 and 2500.0 alike: the spec cannot tell
    them apart, and fuzzers send both), else None; never a boolean. Not for shapes: Triton
    refuses 1.0 there, and so does ``dims``."""
    if _is_int(value):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not 1


def _kind(value: object) -> str:
    """A JSON value's type, for messages."""
    return _JSON_TYPES.get(type(value), "null")


def _input(
    tensor: Mapping[str, Any], body: Body, offset: int, expected: Mapping[str, TensorMeta], booleans: bool
) -> tuple[str, Array, int]:
    name, datatype, shape = tensor.get("name"), tensor.get("datatype"), tensor.get("shape")
    if not isinstance(name, str):
        raise bad("each input needs a string 'name'")
    if not isinstance(datatype, str) or (datatype not in DATATYPES and datatype != "BYTES"):
        raise bad(f"input '{name}': datatype {datatype!r} is not supported; use one of {sorted([*DATATYPES, 'BYTES'])}")
    shape_dims = dims(shape)
    if shape_dims is None:
        raise bad(f"input '{name}': 'shape' must be a list of non-negative integers")
    shape = shape_dims
    meta = expected.get(name)
    if meta is not None:
        check_meta(name, datatype, shape, meta)
    if datatype == "BYTES":
        return _bytes_input(name, tensor, shape, body, offset)
    dtype = LITTLE[datatype]
    numel = math.prod(shape)
    raw = _binary_data_size(name, tensor)
    if raw is not None:
        size = raw if _is_int(raw) else None
        if size is None or size != numel * dtype.itemsize:
            raise bad(
                f"input '{name}': binary_data_size {raw!r} does not match shape {shape} of {datatype} "
                f"({numel * dtype.itemsize} bytes)"
            )
        if offset + size > len(body):
            raise bad(f"input '{name}': the body ends {offset + size - len(body)} bytes before its binary data")
        array = np.frombuffer(body, dtype=dtype, count=numel, offset=offset)
        if not array.flags.aligned:
            # The JSON header's length puts the data at any byte. numpy reads a misaligned view
            # without SIMD (the engine's finite check on a ResNet-50 image: 400-480 µs, against
            # 16 aligned); one copy (~50 µs) gives an aligned array.
            array = array.copy()
        return name, array.reshape(shape), offset + size
    if "data" not in tensor:
        raise bad(f"input '{name}' has neither 'data' nor a binary_data_size parameter")
    array = json_data(name, tensor["data"], datatype, numel, booleans)
    if array.size != numel:
        raise bad(f"input '{name}': shape {shape} needs {numel} values, data has {array.size}")
    return name, array.reshape(shape), offset


def _binary_data_size(name: str, tensor: Mapping[str, Any]) -> object:
    """An input's binary_data_size parameter, None without one."""
    if "parameters" not in tensor:  # the common JSON input: no message to format
        return None
    return _object(tensor["parameters"], f"input '{name}' parameters").get("binary_data_size")


def _bytes_input(
    name: str, tensor: Mapping[str, Any], shape: list[int], body: Body, offset: int
) -> tuple[str, Array, int]:
    raw = _binary_data_size(name, tensor)
    items: list[object]
    if raw is not None:
        size = raw if _is_int(raw) else None
        if size is None or size < 0 or offset + size > len(body):
            raise bad(f"input '{name}': binary_data_size {raw!r} does not fit in the body")
        items = list(split_bytes(name, memoryview(body)[offset : offset + size]))
        offset += size
    else:
        if "data" not in tensor:
            raise bad(f"input '{name}' has neither 'data' nor a binary_data_size parameter")
        items = _flatten(tensor["data"])
        if not all(isinstance(item, str) for item in items):
            raise bad(f"input '{name}': BYTES data must be strings")
    return name, bytes_array(name, items, shape), offset


def _flatten(data: object) -> list[object]:
    """Nested JSON lists -> their leaves in order (iteratively: nesting depth is the client's)."""
    leaves: list[object] = []
    stack = [iter([data])]
    while stack:
        item = next(stack[-1], stack)
        if item is stack:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            leaves.append(item)
    return leaves


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(f"{what} must be a JSON object")
    return value


def encode_response(
    model: str, request: InferRequest, outputs: Mapping[str, Array], version: str = "1"
) -> tuple[bytes, int | None]:
    """(body, JSON header length or None when nothing is binary)."""
    wanted = request.outputs
    if wanted is None and not request.binary_output and request.id is None:
        common = json_answer(model, version, outputs)  # the same bytes, from pieces made once
        if common is not None:
            return common, None
    if wanted is None:
        wanted = dict.fromkeys(outputs, request.binary_output)
    elif not wanted.keys() <= outputs.keys():
        unknown = sorted(set(wanted) - set(outputs))
        raise bad(f"requested outputs {unknown} do not exist; this model has {sorted(outputs)}")
    tensors: list[dict[str, Any]] = []
    blobs: list[memoryview] = []
    any_binary = request.binary_output
    for name, binary in wanted.items():
        array = np.ascontiguousarray(outputs[name])
        dtype = array.dtype
        entry: dict[str, Any] = {"name": name, "datatype": v2_type(dtype), "shape": list(array.shape)}
        if dtype.kind == "O":  # BYTES: strings (or bytes) from a handler
            if binary or any_binary:
                blob = join_bytes(array)
                entry["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(memoryview(blob))
            else:
                items = [v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1).tolist()]
                entry["data"] = [v.decode(errors="replace") for v in items]
        elif binary or any_binary:
            array = array.astype(dtype.newbyteorder("<"), copy=False)  # a no-op on x86/ARM
            entry["parameters"] = {"binary_data_size": array.nbytes}
            blobs.append(array.data)  # the runtime's buffer itself; joined once below
        else:
            entry["data"] = array.ravel()  # a view: the array is contiguous
        tensors.append(entry)
    response: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": tensors}
    if request.id is not None:
        response["id"] = request.id
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def metadata(name: str, schema: Schema, version: str = "1", handler: Handler | None = None) -> dict[str, Any]:
    def tensors(specs: Any) -> list[dict[str, Any]]:
        return [
            {"name": s.name, "datatype": V2_TYPES[s.dtype], "shape": [-1 if d is None else d for d in s.shape]}
            for s in specs
        ]

    return {
        "name": name,
        "versions": [version],
        "platform": "pytorch",
        "inputs": handler.v2_inputs if handler else tensors(schema.inputs),
        "outputs": handler.v2_outputs if handler else tensors(schema.outputs),
    }
