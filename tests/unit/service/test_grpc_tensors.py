"""ModelInfer's tensor codec without a server: raw and typed contents in, raw contents out."""

from __future__ import annotations

import numpy as np
import pytest

from inferpool.service.apierror import ApiError
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.grpc.tensors import decode, encode
from inferpool.service.v2.datatypes import TensorMeta

EXPECTED = {"image": TensorMeta("FP32", (-1, 1, 8, 8))}


def _request(datatype: str, shape: tuple[int, ...], raw: bytes | None = None, **contents) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype=datatype, shape=shape)
    for field, values in contents.items():
        getattr(tensor.contents, field).extend(values)
    if raw is not None:
        request.raw_input_contents.append(raw)
    return request


def test_raw_input_is_a_writable_view_of_its_bytes():
    array = np.arange(12, dtype="<f4").reshape(3, 4)
    got = decode(_request("FP32", (3, 4), array.tobytes()), {}).inputs["x"]
    np.testing.assert_array_equal(got, array)
    assert got.flags.writeable  # a model may write into its inputs


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"),
    [
        ("FP32", "fp32_contents", [1.5, -2.0], np.float32),
        ("FP64", "fp64_contents", [1.5, -2.0], np.float64),
        ("INT8", "int_contents", [-128, 127], np.int8),
        ("UINT16", "uint_contents", [0, 65535], np.uint16),
        ("INT64", "int64_contents", [-(2**40), 2**40], np.int64),
        ("BOOL", "bool_contents", [True, False], np.bool_),
    ],
)
def test_typed_contents_become_the_declared_datatype(datatype, field, values, dtype):
    got = decode(_request(datatype, (2,), **{field: values}), {}).inputs["x"]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.array(values, dtype=dtype))


def test_bytes_raw_and_typed_alike():
    words = [b"a", b"", "é".encode()]
    raw = b"".join(len(w).to_bytes(4, "little") + w for w in words)
    for request in (_request("BYTES", (3,), raw), _request("BYTES", (3,), bytes_contents=words)):
        got = decode(request, {}).inputs["x"]
        assert got.dtype == object
        assert got.tolist() == words


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (_request("FP32", (2,), b"\0" * 7), "raw contents hold 7 bytes"),
        (_request("INT8", (1,), int_contents=[300]), "out of range for INT8"),
        (_request("FP32", (3,), fp32_contents=[1.0]), "needs 3 values"),
        (_request("FP16", (1,), fp32_contents=[1.0]), "FP16 has no typed contents field"),
        (_request("COMPLEX", (1,)), "datatype 'COMPLEX' is not supported"),
        (_request("BYTES", (1,), b"\x09\0\0\0ab"), "runs past the end"),
        (_request("BYTES", (2,), bytes_contents=[b"a"]), "needs 2 values"),
    ],
)
def test_bad_tensors_are_400s_that_say_why(request_, words):
    with pytest.raises(ApiError, match=words.replace("(", r"\(")) as caught:
        decode(request_, {})
    assert caught.value.status == 400


def test_inputs_are_checked_against_the_metadata():
    request = _request("FP32", (2, 1, 8, 4), b"\0" * 256)
    request.inputs[0].name = "image"
    with pytest.raises(ApiError, match=r"the model takes \[-1, 1, 8, 8\]"):
        decode(request, EXPECTED)


def test_timeout_parameter_in_microseconds():
    request = _request("FP32", (1,), fp32_contents=[1.0])
    request.parameters["timeout"].int64_param = 2500
    assert decode(request, {}).timeout_ms == 2.5
    for too_short in (-1, 0, 999):  # under 1 ms: a deadline no model here can meet is invalid
        request.parameters["timeout"].int64_param = too_short
        with pytest.raises(ApiError, match=r"integer of microseconds, 1000 \(1 ms\) or more") as refused:
            decode(request, {})
        assert refused.value.status == 400


def test_encode_answers_raw_in_the_requested_order():
    outputs: dict[str, np.ndarray] = {
        "p": np.array([[0.25, 0.75]], np.float32),
        "label": np.array([1], np.int64),
        "t": np.array([b"hi"], object),
    }
    response = encode("m", "1", "id-1", outputs, ["label", "t"])
    assert (response.model_name, response.model_version, response.id) == ("m", "1", "id-1")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("label", "INT64", [1]),
        ("t", "BYTES", [1]),
    ]
    assert np.frombuffer(response.raw_output_contents[0], "<i8").tolist() == [1]
    assert response.raw_output_contents[1] == b"\x02\0\0\0hi"
    everything = encode("m", "1", "", outputs, None)
    assert [o.name for o in everything.outputs] == ["p", "label", "t"]
    with pytest.raises(ApiError, match=r"\['nope'\] do not exist"):
        encode("m", "1", "", outputs, ["nope"])
