"""true/false among numbers is a 400 naming the field, on /predict and v2 JSON data (numpy alone
would read [0.5, false] as [0.5, 0.0]); booleans alone, numbers alone and text stay as they were."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from inferpool.engine import InvalidInput
from inferpool.service.apierror import ApiError
from inferpool.service.http.codec import decode_inputs
from inferpool.service.http.json_booleans import may_hold_boolean, mixes_booleans
from inferpool.service.v2.codec import parse_request
from inferpool.service.v2.datatypes import TensorMeta

ROW = [0.0] * 8


@pytest.mark.parametrize(
    "value",
    [
        [0.5, False],
        [1, True],
        [[[*ROW[:7], False]] + [ROW] * 7],
        [[True] * 8, ROW],  # one row of booleans beside one of numbers: numpy makes floats of both
        [[[ROW]], [[[True]]]],
    ],
)
def test_booleans_among_numbers_are_found(value):
    assert mixes_booleans(value)


@pytest.mark.parametrize("value", [[0.5, 1], [[True, False], [False, True]], ["a", "true"], [], 3.0, True, [[]]])
def test_one_kind_is_not_a_mix(value):
    assert not mixes_booleans(value)


def test_predict_refuses_a_boolean_in_a_float_array_naming_the_field():
    with pytest.raises(InvalidInput, match=r"^'inputs' mixes true/false with numbers") as bare:
        decode_inputs(orjson.dumps({"inputs": [[[*ROW[:7], False]] + [ROW] * 7]}))
    assert bare.value.input_name is None
    with pytest.raises(InvalidInput, match=r"^input 'image' mixes true/false with numbers") as named:
        decode_inputs(orjson.dumps({"inputs": {"image": [[ROW] * 7 + [[True, *ROW[1:]]]]}}))
    assert named.value.input_name == "image"


def test_predict_takes_booleans_alone_numbers_alone_and_text_with_the_words_in_it():
    assert decode_inputs(orjson.dumps({"inputs": {"mask": [True, False]}})) == {"mask": [True, False]}
    assert decode_inputs(orjson.dumps({"inputs": [ROW]})) == [ROW]
    assert decode_inputs(orjson.dumps({"inputs": ["true or false?", "really"]})) == ["true or false?", "really"]


def test_v2_json_data_refuses_a_boolean_among_fp32_values():
    tensor = {"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8], "data": [0.0] * 63 + [False]}
    with pytest.raises(ApiError, match=r"input 'image': FP32 data must be JSON numbers; got true/false among them"):
        parse_request(
            bytearray(json.dumps({"inputs": [tensor]}).encode()), None, {"image": TensorMeta("FP32", (-1, 1, 8, 8))}
        )


def test_v2_json_data_with_a_binary_output_flag_is_still_taken():
    """true in the body (a parameter) makes the data walked, and numbers alone pass."""
    tensor = {"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8], "data": [0.5] * 64}
    body = {"inputs": [tensor], "parameters": {"binary_data_output": True}}
    request = parse_request(bytearray(json.dumps(body).encode()), None, {"image": TensorMeta("FP32", (-1, 1, 8, 8))})
    np.testing.assert_array_equal(request.inputs["image"], np.full((1, 1, 8, 8), 0.5, np.float32))


def test_the_literal_search_is_bounded_by_the_json_part():
    body = bytearray(b'{"inputs": [1, 2]}' + b"true")
    assert may_hold_boolean(body)
    assert not may_hold_boolean(body, len(b'{"inputs": [1, 2]}'))
    assert not may_hold_boolean(orjson.dumps({"inputs": [[0.25, -1e-05, 3.0]]}))
