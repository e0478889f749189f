"""What the v2 REST codec and the deadline header take, as the spec and the README say: shapes
and sizes as JSON integers (Triton refuses 1.0), ``timeout`` of 1 ms or more, a zero
Inference-Header-Content-Length meaning an all-JSON body, and X-Request-Timeout-Ms an unsigned
integer of milliseconds, 1 or more."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from inferpool.service.apierror import ApiError
from inferpool.service.timing import deadline
from inferpool.service.v2.codec import parse_request
from inferpool.service.v2.datatypes import TensorMeta

EXPECTED = {"image": TensorMeta("FP32", (-1, 1, 8, 8))}


def body(shape: list[object] | None = None, **extra: object) -> bytearray:
    image = {"name": "image", "datatype": "FP32", "shape": shape or [1, 1, 8, 8], "data": [0.0] * 64}
    return bytearray(json.dumps({"inputs": [image], **extra}).encode())


def refused(message: str, payload: bytearray, header_length: str | None = None) -> None:
    with pytest.raises(ApiError, match=message) as error:
        parse_request(payload, header_length, EXPECTED)
    assert error.value.status == 400


@pytest.mark.parametrize("shape", [[1.0, 1, 8, 8], [1, 1, 8.0, 8], [1, 1, 8, 8.5], [True, 1, 8, 8]])
def test_a_shape_of_non_integers_is_a_400_as_in_triton(shape):
    refused("'shape' must be a list of non-negative integers", body(shape))


def test_a_binary_data_size_must_be_an_integer_too():
    header = json.dumps(
        {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8],
                     "parameters": {"binary_data_size": 256.0}}]}
    ).encode()  # fmt: skip
    refused("binary_data_size 256.0", bytearray(header + b"\0" * 256), str(len(header)))


@pytest.mark.parametrize("timeout", [0, 1, 999, -5, 999.0, 1500.5, True, "2000", None])
def test_a_timeout_under_a_millisecond_or_not_an_integer_is_a_400(timeout):
    refused(r"parameter 'timeout' must be an integer of microseconds, 1000 \(1 ms\) or more", body(
        parameters={"timeout": timeout}))  # fmt: skip


def test_a_timeout_of_a_millisecond_or_more_is_taken_in_microseconds():
    assert parse_request(body(parameters={"timeout": 1000}), None, EXPECTED).timeout_ms == 1.0
    assert parse_request(body(parameters={"timeout": 2500}), None, EXPECTED).timeout_ms == 2.5
    # JSON Schema's integer, which fuzzers send either way (unlike a shape, which Triton checks)
    assert parse_request(body(parameters={"timeout": 2500.0}), None, EXPECTED).timeout_ms == 2.5


@pytest.mark.parametrize("extra", [{"outputs": None}, {"id": None}, {"parameters": None}, {"outputs": {}}])
def test_null_is_not_an_absent_field(extra):
    """The spec says a list, a string, an object: null is none of them (a 400, not ignored)."""
    refused(r"must be|needs|is not", body(**extra))


def test_a_zero_header_length_means_the_whole_body_is_the_json():
    parsed = parse_request(body(), "0", EXPECTED)
    assert parsed.inputs["image"].shape == (1, 1, 8, 8)
    payload = body()
    assert parse_request(payload, str(len(payload)), EXPECTED).inputs["image"].shape == (1, 1, 8, 8)


def test_a_zero_header_length_with_binary_inputs_is_still_refused():
    header = json.dumps(
        {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8],
                     "parameters": {"binary_data_size": 256}}]}
    ).encode()  # fmt: skip
    refused("not valid JSON", bytearray(header + b"\0" * 256), "0")


@pytest.mark.parametrize(
    "value",
    [b"0", b"0.5", b"5e-324", b"1e3", b"1.0", b"+5", b"-1", b" 5", b"1_000", b"nan", b"inf", b"", b"0250", b"9" * 20],
)
def test_the_deadline_header_is_an_unsigned_integer_of_at_least_one_ms(value):
    with pytest.raises(ApiError, match=r"X-Request-Timeout-Ms .* must be an unsigned integer of milliseconds") as error:
        deadline(value, 1000.0)
    assert error.value.status == 400


@pytest.mark.parametrize(("value", "ms"), [(b"1", 1), (b"250", 250), (b"9" * 19, None)])
def test_the_deadline_header_in_milliseconds(value, ms):
    before = time.monotonic()
    when = deadline(value, 1000.0)
    assert when is not None
    if ms is not None:
        assert before + ms / 1e3 <= when <= time.monotonic() + ms / 1e3
    else:
        assert when > before + 1e15  # ~292 million years: taken, not overflowed


def test_a_bad_deadline_header_is_refused_even_when_the_v2_parameter_wins():
    with pytest.raises(ApiError, match="X-Request-Timeout-Ms"):
        deadline(b"+0.0", 1000.0, override_ms=5.0)
    when = deadline(b"9999", 1000.0, override_ms=5.0)
    assert when is not None
    assert when <= time.monotonic() + 0.005


@pytest.mark.parametrize("pad", range(4))
def test_binary_data_is_an_aligned_array_of_its_values_wherever_the_header_ends_it(pad):
    values = np.arange(64, dtype=np.float32) / 7
    header = json.dumps(
        {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8],
                     "parameters": {"binary_data_size": 256}}]}
    ).encode() + b" " * pad  # fmt: skip
    payload = bytearray(header + values.tobytes())
    image = dict(parse_request(payload, str(len(header)), EXPECTED).inputs)["image"]
    assert image.flags.aligned  # numpy reads a misaligned array ~30x slower (no SIMD)
    np.testing.assert_array_equal(image.reshape(-1), values)
    if len(header) % 4 == 0:  # aligned already: still a view of the body, no copy
        assert np.shares_memory(image, np.frombuffer(payload, dtype=np.uint8))
