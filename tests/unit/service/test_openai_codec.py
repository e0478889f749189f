"""OpenAI's embeddings API on the wire: request parsing, the model checks, the answer's encodings
and the error object (service/http/openai_codec.py, service/apierror.py)."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from inferpool.engine import TextEmbedding, TokenIds
from inferpool.engine.client import TextInputs
from inferpool.service.apierror import ApiError, error_body_for
from inferpool.service.http.openai_codec import EmbeddingsRequest, encode_response, for_model, parse_request

DECLARED = TextEmbedding(dimensions=4, token_ids=True)


def parse(**body: object) -> EmbeddingsRequest:
    return parse_request(orjson.dumps(body))


@pytest.mark.parametrize(
    ("given", "inputs"),
    [
        ("one text", ["one text"]),
        (["a", "b"], ["a", "b"]),
        ([101, 7592, 102], TokenIds([[101, 7592, 102]])),
        ([[101, 102], [101, 7, 102]], TokenIds([[101, 102], [101, 7, 102]])),
        ([101.0, 102], TokenIds([[101, 102]])),  # JSON has one number type: 101.0 is the integer 101
    ],
)
def test_every_input_shape_the_api_allows(given, inputs):
    assert parse(model="m", input=given).inputs == inputs


def test_defaults_and_nulls_mean_absent():
    assert parse(model="m", input="x") == EmbeddingsRequest("m", ["x"], base64=False, dimensions=None)
    nulls = parse(model="m", input="x", encoding_format=None, dimensions=None, user=None)
    assert nulls == EmbeddingsRequest("m", ["x"])
    chosen = parse(model="m", input="x", encoding_format="base64", dimensions=2, user="u-1")
    assert chosen == EmbeddingsRequest("m", ["x"], base64=True, dimensions=2)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (b"", None, "not valid JSON"),
        (b"[1]", None, "JSON object"),
        (b'{"input": "x"}', "model", "'model' is required"),
        (b'{"model": 3, "input": "x"}', "model", "'model' is required"),
        (b'{"model": "m"}', "input", "'input' is required"),
        (b'{"model": "m", "input": []}', "input", "not empty"),
        (b'{"model": "m", "input": 3}', "input", "a list of token ids"),
        (b'{"model": "m", "input": ["a", 1]}', "input", "item 1 is not a string"),
        (b'{"model": "m", "input": [1, "a"]}', "input", "only token ids"),
        (b'{"model": "m", "input": [1, true]}', "input", "only token ids"),  # JSON true is not 1
        (b'{"model": "m", "input": [1.5]}', "input", "only token ids"),
        (b'{"model": "m", "input": [[1], []]}', "input", "item 1 must be a non-empty list"),
        (b'{"model": "m", "input": [[1], 2]}', "input", "item 1 must be a non-empty list"),
        (b'{"model": "m", "input": "x", "encoding_format": "int8"}', "encoding_format", "'float' or 'base64'"),
        (b'{"model": "m", "input": "x", "dimensions": 0}', "dimensions", "positive integer"),
        (b'{"model": "m", "input": "x", "dimensions": true}', "dimensions", "positive integer"),
        (b'{"model": "m", "input": "x", "dimensions": "8"}', "dimensions", "positive integer"),
        (b'{"model": "m", "input": "x", "user": 7}', "user", "'user' must be a string"),
        (b'{"model": "m", "input": "x", "truncate": true}', "truncate", "unrecognized request argument 'truncate'"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(body, param, words):
    with pytest.raises(ApiError) as refused:
        parse_request(body)
    assert (refused.value.status, refused.value.param) == (400, param)
    assert words in str(refused.value)


def test_the_model_decides_token_ids_and_the_largest_dimensions():
    for_model(parse(model="m", input=[1, 2], dimensions=4), "m", DECLARED)
    with pytest.raises(ApiError, match="1 to 4") as refused:
        for_model(parse(model="m", input="x", dimensions=5), "m", DECLARED)
    assert refused.value.param == "dimensions"
    with pytest.raises(ApiError, match="takes text only") as refused:
        for_model(parse(model="m", input=[[1, 2]]), "m", TextEmbedding(dimensions=4))
    assert refused.value.param == "input"


OUTPUTS = {
    "embedding": np.array([[0.5, 0.5, 0.5, 0.5], [0.0, 0.6, 0.8, 0.0]], dtype=np.float32),
    "tokens": np.array([3, 5]),
}


def answer(**body: object) -> dict:
    return orjson.loads(encode_response("m", OUTPUTS, DECLARED, parse(model="m", input=["a", "b"], **body)))


def test_the_answer_in_floats_with_usage():
    got = answer()
    assert got["object"] == "list"
    assert got["model"] == "m"
    assert got["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    assert [(d["object"], d["index"]) for d in got["data"]] == [("embedding", 0), ("embedding", 1)]
    # Each float32 written as its shortest repr: read back as float32, exactly the same value.
    floats = np.array([d["embedding"] for d in got["data"]], dtype=np.float32)
    np.testing.assert_array_equal(floats, OUTPUTS["embedding"])


def test_base64_is_the_little_endian_float32_bytes():
    for item, want in zip(answer(encoding_format="base64")["data"], OUTPUTS["embedding"], strict=True):
        raw = base64.b64decode(item["embedding"])
        assert raw == want.astype("<f4").tobytes()


def test_dimensions_keep_the_first_values_at_unit_length():
    got = np.array([d["embedding"] for d in answer(dimensions=2)["data"]])
    np.testing.assert_allclose(got, [[2**-0.5, 2**-0.5], [0.0, 1.0]], rtol=1e-6)
    assert np.array([d["embedding"] for d in answer(dimensions=4)["data"]]).shape == (2, 4)


def test_errors_have_the_api_shape_under_v1_only():
    openai_shape = orjson.loads(error_body_for("/v1/embeddings", 404, "gone", reason="unknown_model", param="model"))
    assert openai_shape == {
        "error": {"message": "gone", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    }
    late = orjson.loads(error_body_for("/v1/embeddings", 504, "late", reason="deadline"))
    assert late["error"] == {"message": "late", "type": "server_error", "param": None, "code": "deadline"}
    assert orjson.loads(error_body_for("/predict", 400, "bad", reason="invalid_input", input="x")) == {
        "error": "bad",
        "input": "x",
    }


def test_a_prompt_name_sends_text_inputs_checked_against_the_models_prompts():
    request = parse_request(orjson.dumps({"model": "m", "input": ["a", "b"], "prompt_name": "query"}))
    assert request.inputs == TextInputs(["a", "b"], prompt_name="query")
    for_model(request, "m", TextEmbedding(4, prompts=(("query", "q: "),)))
    with pytest.raises(ApiError, match="has no named prompts") as refused:
        for_model(request, "m", TextEmbedding(4))
    assert refused.value.param == "prompt_name"
    with pytest.raises(ApiError, match="token ids are sent whole"):
        parse_request(orjson.dumps({"model": "m", "input": [1, 2], "prompt_name": "query"}))
    assert parse_request(orjson.dumps({"model": "m", "input": "a", "prompt_name": None})).inputs == ["a"]
