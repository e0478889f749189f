"""The common v2 JSON request read in fewer steps (service/v2/json_common.py) gives exactly what
the codec's general walk gives, and leaves everything else to that walk, which words the 400."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from inferpool.service.apierror import ApiError
from inferpool.service.v2.codec import parse_request
from inferpool.service.v2.datatypes import TensorMeta
from inferpool.service.v2.json_common import common_inputs

EXPECTED = {
    "image": TensorMeta("FP32", (-1, 1, 8, 8)),
    "wide": TensorMeta("FP64", (-1, 3)),
    "ids": TensorMeta("INT64", (-1, 4)),
}
IMAGE = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [float(v) / 7 for v in range(64)]}
WIDE = {"datatype": "FP64", "name": "wide", "data": [1e300, -2.5, 0.1], "shape": [1, 3]}

TAKEN: dict[str, list[object]] = {
    "the digits image": [IMAGE],
    "integers in FP32 data": [IMAGE | {"data": list(range(64))}],
    "a batch of two": [IMAGE | {"shape": [2, 1, 8, 8], "data": [0.5] * 128}],
    "FP64, keys in another order": [WIDE],
    "two inputs": [IMAGE, WIDE],
    "the largest FP32": [IMAGE | {"data": [3.4028234663852886e38] * 64}],
    "an empty batch": [WIDE | {"shape": [0, 3], "data": []}],
}
LEFT: dict[str, list[object]] = {
    "a shape of floats": [IMAGE | {"shape": [1.0, 1, 8, 8]}],
    "a shape with true": [IMAGE | {"shape": [True, 1, 8, 8]}],
    "a negative dimension": [IMAGE | {"shape": [-1, 1, 8, 8]}],
    "the wrong shape": [IMAGE | {"shape": [1, 1, 4, 16]}],
    "another datatype": [IMAGE | {"datatype": "FP64"}],
    "an integer datatype": [{"name": "ids", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 4]}],
    "an input the model does not name": [IMAGE | {"name": "picture"}],
    "a name that is no string": [IMAGE | {"name": ["image"]}],
    "parameters": [IMAGE | {"parameters": {"binary_data_size": 256}}],
    "no data": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "extra": 1}],
    "too few values": [IMAGE | {"data": [0.0] * 63}],
    "nested data": [IMAGE | {"data": [[0.0] * 8] * 8}],
    "a string among the values": [IMAGE | {"data": ["1.0", *[0.0] * 63]}],
    "a null among the values": [IMAGE | {"data": [None, *[0.0] * 63]}],
    "a value beyond FP32": [IMAGE | {"data": [1e39, *[0.0] * 63]}],
    "the same input twice": [IMAGE, IMAGE],
    "an input that is no object": [[IMAGE]],
}


def general(inputs: list[object]) -> dict[str, np.ndarray] | ApiError:
    """The general walk's answer: an ``id`` makes the body other than the common one."""
    try:
        return parse_request(bytearray(json.dumps({"inputs": inputs, "id": "x"}).encode()), None, EXPECTED).inputs
    except ApiError as exc:
        return exc


@pytest.mark.parametrize("case", list(TAKEN))
def test_the_common_inputs_are_what_the_general_walk_gives(case):
    inputs = orjson.loads(json.dumps(TAKEN[case]))
    found = common_inputs(inputs, EXPECTED)
    assert found is not None
    want = general(inputs)
    assert not isinstance(want, ApiError)
    assert found.keys() == want.keys()
    for name, array in found.items():
        assert array.dtype == want[name].dtype
        assert array.shape == want[name].shape
        assert array.tobytes() == want[name].tobytes()
        assert array.flags.writeable
        assert array.flags.c_contiguous


@pytest.mark.parametrize("case", list(LEFT))
def test_anything_else_is_left_to_the_general_walk(case):
    assert common_inputs(orjson.loads(json.dumps(LEFT[case])), EXPECTED) is None


@pytest.mark.parametrize("case", list(LEFT))
def test_a_body_of_just_inputs_is_answered_as_with_more_fields(case):
    """Whether or not the body takes the common way, ``parse_request`` answers the same."""
    inputs = LEFT[case]
    want = general(inputs)
    try:
        got: dict[str, np.ndarray] | ApiError = parse_request(
            bytearray(json.dumps({"inputs": inputs}).encode()), None, EXPECTED
        ).inputs
    except ApiError as exc:
        got = exc
    if isinstance(want, ApiError):
        assert isinstance(got, ApiError)
        assert str(got) == str(want)
        assert got.status == want.status
    else:
        assert not isinstance(got, ApiError)
        assert {k: v.tobytes() for k, v in got.items()} == {k: v.tobytes() for k, v in want.items()}


def test_a_body_with_booleans_or_binary_data_takes_the_general_walk():
    with_true = bytearray(json.dumps({"inputs": [IMAGE | {"data": [True, *[0.0] * 63]}]}).encode())
    with pytest.raises(ApiError, match="true/false among them"):
        parse_request(with_true, None, EXPECTED)
    header = json.dumps({"inputs": [IMAGE]}).encode()
    with pytest.raises(ApiError, match="bytes beyond the binary inputs"):
        parse_request(bytearray(header + b"\0" * 8), str(len(header)), EXPECTED)
