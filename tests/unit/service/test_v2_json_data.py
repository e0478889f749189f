"""The v2 JSON codec's packed decode of a flat list of numbers (service/v2/json_data.py) gives
what numpy's general way gives, and leaves to it everything that way refuses, so that a bad
request's 400 says the same either way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferpool.service.apierror import ApiError
from inferpool.service.v2.codec import parse_request
from inferpool.service.v2.datatypes import TensorMeta
from inferpool.service.v2.json_data import _general, flat_floats

EXPECTED = {"image": TensorMeta("FP32", (-1, 1, 8, 8))}
VALUES: list[list[object]] = [
    [float(v) for v in np.random.default_rng(0).integers(0, 17, 64)],
    [float(v) for v in np.random.default_rng(1).standard_normal(64) * 1e3],
    [1e-45, 3e-39, -0.0, 0.1, 1 / 3, 3.4028234663852886e38, -3.4028235e38, 16777217.0] * 8,  # rounding edges
    list(range(64)),  # JSON integers: numpy reads int64, struct packs them as doubles
    [0.5, 1, 2.25, -3] * 16,  # mixed
]


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("datatype", ["FP32", "FP64"])
def test_packed_values_are_numpys(values, datatype):
    packed = flat_floats(values, datatype, len(values))
    general = _general("image", values, datatype)
    assert packed is not None
    assert packed.dtype == general.dtype
    assert packed.flags.writeable
    assert packed.flags.aligned
    assert packed.flags.c_contiguous
    np.testing.assert_array_equal(packed, general)
    assert np.signbit(packed).tolist() == np.signbit(general).tolist()  # -0.0 stays negative


@pytest.mark.parametrize(
    "values",
    [
        [1.0] * 63 + ["1.0"],  # a string numpy would parse
        [1.0] * 63 + [None],
        [[1.0] * 8] * 8,  # nested: the general way reads it
        [1.0] * 63 + [1e300],  # beyond FP32
        [1.0] * 63 + [10**400],  # beyond a double
        [1.0] * 63 + [{"a": 1}],
        [1.0] * 65,  # not the shape's count
    ],
)
def test_what_it_cannot_take_is_left_to_the_general_way(values):
    assert flat_floats(values, "FP32", 64) is None


@pytest.mark.parametrize("datatype", ["FP16", "INT64", "INT32", "UINT8", "BOOL", "BYTES"])
def test_other_datatypes_are_left_to_the_general_way(datatype):
    assert flat_floats([1.0] * 4, datatype, 4) is None


def body(data: list[object], datatype: str = "FP32") -> bytearray:
    image = {"name": "image", "datatype": datatype, "shape": [1, 1, 8, 8], "data": data}
    return bytearray(json.dumps({"inputs": [image]}).encode())


def test_a_request_decodes_to_the_models_shape_and_values():
    values = VALUES[1]
    image = parse_request(body(values), None, EXPECTED).inputs["image"]
    assert image.shape == (1, 1, 8, 8)
    assert image.dtype == np.float32
    np.testing.assert_array_equal(image.reshape(-1), np.asarray(values, dtype=np.float64).astype(np.float32))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1.0] * 63 + [1e300], "data has values out of range for FP32"),
        ([1.0] * 63 + ["a"], "FP32 data must be JSON numbers"),
        ([1.0] * 63 + [True], "got true/false among them"),
        ([True] * 64, "FP32 data must be JSON numbers; got booleans"),
        ([1.0] * 63 + [None], "FP32 data must be JSON numbers"),
        ([1.0] * 60, r"shape \[1, 1, 8, 8\] needs 64 values, data has 60"),
    ],
)
def test_a_bad_list_gets_the_general_ways_400(data, message):
    with pytest.raises(ApiError, match=message) as error:
        parse_request(body(data), None, EXPECTED)
    assert error.value.status == 400
