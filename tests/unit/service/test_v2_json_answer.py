"""The common v2 answer joined from kept pieces (service/v2/json_answer.py) is byte for byte the
one orjson writes from the whole dict, and anything else is left to ``encode_response``'s way."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from inferpool.service.v2.codec import InferRequest, encode_response
from inferpool.service.v2.datatypes import v2_type
from inferpool.service.v2.json_answer import json_answer

RNG = np.random.default_rng(0)
OUTPUTS: list[dict[str, Any]] = [
    {"probabilities": RNG.random((1, 10), dtype=np.float32), "label": np.array([3], dtype=np.longlong)},
    {"probabilities": RNG.random((4, 10), dtype=np.float32), "label": np.arange(4, dtype=np.int64)},
    {"scores": RNG.random((2, 3)).astype(np.float16), "mask": np.array([[True, False, True]])},
    {"x": RNG.random((3, 4), dtype=np.float64).T, "u": np.arange(6, dtype=np.uint8).reshape(2, 3)},  # x: a view
    {'ünï "quoted"': np.array([1.5, -0.0, 1e-45], dtype=np.float32)},
    {"empty": np.zeros((0, 10), dtype=np.float32)},
]


def whole_dict(model: str, version: str, outputs: dict[str, Any]) -> bytes:
    """The answer as encode_response's general way writes it: one dict, one orjson call."""
    tensors = [
        {"name": name, "datatype": v2_type(array.dtype), "shape": list(array.shape), "data": array.ravel()}
        for name, array in outputs.items()
    ]
    response = {"model_name": model, "model_version": version, "outputs": tensors}
    return orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_the_same_bytes_as_the_whole_dict(outputs):
    for _ in range(2):  # made, then from the kept pieces
        assert json_answer("digits", "1", outputs) == whole_dict("digits", "1", outputs)
    assert encode_response("digits", InferRequest({}), outputs, "7") == (whole_dict("digits", "7", outputs), None)


def test_a_new_shape_or_model_gets_its_own_pieces():
    one = {"label": np.array([1], dtype=np.int64)}
    two = {"label": np.array([1, 2], dtype=np.int64)}
    assert json_answer("a", "1", one) == whole_dict("a", "1", one)
    assert json_answer("a", "1", two) == whole_dict("a", "1", two)
    assert json_answer("b", "2", one) == whole_dict("b", "2", one)


@pytest.mark.parametrize(
    "outputs",
    [{}, {"text": np.array([b"a", b"b"], dtype=object)}, {"label": np.int64(3)}, {"label": [1, 2]}],
)
def test_what_it_does_not_write_is_left_to_the_general_way(outputs):
    assert json_answer("digits", "1", outputs) is None


def test_an_id_or_chosen_outputs_take_the_general_way():
    outputs = OUTPUTS[0]
    with_id = orjson.loads(encode_response("digits", InferRequest({}, id="r-1"), outputs)[0])
    assert with_id["id"] == "r-1"
    chosen = orjson.loads(encode_response("digits", InferRequest({}, outputs={"label": False}), outputs)[0])
    assert [o["name"] for o in chosen["outputs"]] == ["label"]
    body, header_length = encode_response("digits", InferRequest({}, binary_output=True), outputs)
    assert header_length is not None
    assert body[:header_length].startswith(b'{"model_name":"digits"')
