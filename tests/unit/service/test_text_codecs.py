"""The text routes' bodies in and answers out (TEI's, Cohere's, Infinity's), their scores, and
errors in each API's shape."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from inferpool.engine.client import TextClassification, TextEmbedding, TextInputs, TextPairs, TextRerank, Token
from inferpool.service.apierror import ApiError, error_body_for
from inferpool.service.http import rerank_codec, tei_codec
from inferpool.service.http.text_scores import check_prompt, labelled, ranked

EMBEDDER = TextEmbedding(3, prompts=(("query", "q: "),), unnormalized="raw")


def body(value: object) -> bytes:
    return orjson.dumps(value)


def refused(parse, value: object) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(value if isinstance(value, bytes) else body(value))
    assert caught.value.status == 400
    return caught.value


def test_embed_takes_a_string_or_a_list_and_teis_options():
    request = tei_codec.parse_embed(body({"inputs": "Hi", "normalize": False, "prompt_name": "query", "model": "m"}))
    assert request == tei_codec.EmbedRequest("m", TextInputs(["Hi"], True, "query", False))
    listed = tei_codec.parse_embed(body({"inputs": ["a", "b"], "truncate": False, "truncation_direction": "Right"}))
    assert listed.inputs == TextInputs(["a", "b"], truncate=False)
    assert listed.model is None


@pytest.mark.parametrize(
    ("value", "param", "words"),
    [
        ({"inputs": []}, "inputs", "non-empty list"),
        ({"inputs": ["a", " \t"]}, "inputs", "'inputs' item 1 is blank"),
        ({"inputs": "a", "normalize": "yes"}, "normalize", "true or false"),
        ({"inputs": "a", "truncation_direction": "Left"}, "truncation_direction", "'Right'"),
        ({"inputs": "a", "dimensions": 3}, "dimensions", "unknown field"),
        ({"inputs": "a", "model": 3}, "model", "must be a string"),
        ([1, 2], None, "JSON object"),
    ],
)
def test_embed_refusals_name_the_field(value, param, words):
    error = refused(tei_codec.parse_embed, value)
    assert error.param == param
    assert words in str(error)


def test_not_json_is_a_400():
    assert "not valid JSON" in str(refused(tei_codec.parse_rerank, b"{"))


def test_embed_checks_what_the_model_decides():
    request = tei_codec.parse_embed(body({"inputs": "a", "prompt_name": "passage"}))
    with pytest.raises(ApiError, match="its prompts are 'query'"):
        tei_codec.embed_for_model(request, "m", EMBEDDER)
    unit_only = TextEmbedding(3)
    request = tei_codec.parse_embed(body({"inputs": "a", "normalize": False}))
    with pytest.raises(ApiError, match="unit-length embeddings only") as caught:
        tei_codec.embed_for_model(request, "m", unit_only)
    assert caught.value.param == "normalize"
    tei_codec.embed_for_model(request, "m", EMBEDDER)  # it has them


def test_embed_answers_the_unnormalized_output_when_asked():
    outputs = {"embedding": np.eye(2, 3, dtype=np.float32), "raw": np.full((2, 3), 2.0, np.float32)}
    unit = tei_codec.parse_embed(body({"inputs": ["a", "b"]}))
    assert orjson.loads(tei_codec.encode_embed("m", outputs, EMBEDDER, unit, "r")) == [[1, 0, 0], [0, 1, 0]]
    raw = tei_codec.parse_embed(body({"inputs": ["a", "b"], "normalize": False}))
    assert orjson.loads(tei_codec.encode_embed("m", outputs, EMBEDDER, raw, "r")) == [[2, 2, 2], [2, 2, 2]]


def test_tei_rerank_is_best_first_with_sigmoid_or_raw_scores():
    outputs = {"score": np.array([0.0, 2.0, -1.0], np.float32), "tokens": np.array([3, 4, 5])}
    request = tei_codec.parse_rerank(body({"query": "q", "texts": ["a", "b", "c"], "return_text": True}))
    answer = orjson.loads(tei_codec.encode_rerank("m", outputs, TextRerank(), request, "r"))
    assert [(r["index"], r["text"]) for r in answer] == [(1, "b"), (0, "a"), (2, "c")]
    np.testing.assert_allclose([r["score"] for r in answer], 1 / (1 + np.exp([-2.0, 0.0, 1.0])))
    raw = tei_codec.parse_rerank(body({"query": "q", "texts": ["a", "b", "c"], "raw_scores": True}))
    answer = orjson.loads(tei_codec.encode_rerank("m", outputs, TextRerank(), raw, "r"))
    assert answer == [{"index": 1, "score": 2.0}, {"index": 0, "score": 0.0}, {"index": 2, "score": -1.0}]


def test_rerank_needs_a_query_and_texts():
    assert refused(tei_codec.parse_rerank, {"texts": ["a"]}).param == "query"
    assert refused(tei_codec.parse_rerank, {"query": "q", "texts": "a"}).param == "texts"
    assert tei_codec.parse_rerank(body({"query": "q", "texts": ["a"]})).pairs == TextPairs("q", ["a"])


def test_tokenize_answers_teis_token_objects():
    request = tei_codec.parse_tokenize(body({"inputs": "a", "add_special_tokens": False}))
    assert (request.texts, request.add_special_tokens) == (["a"], False)
    tokens = [[Token(5, "a", False, 0, 1), Token(2, "[SEP]", True, None, None)]]
    assert orjson.loads(tei_codec.encode_tokens(tokens)) == [
        [
            {"id": 5, "text": "a", "special": False, "start": 0, "stop": 1},
            {"id": 2, "text": "[SEP]", "special": True, "start": None, "stop": None},
        ]
    ]


def test_v1_rerank_takes_strings_or_text_objects_and_top_n():
    value = {"model": "m", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1.0, "return_documents": True}
    request = rerank_codec.parse_documents(body(value))
    assert request == rerank_codec.DocumentsRequest("m", TextPairs("q", ["a", "b"]), 1, True)
    outputs = {"score": np.array([0.0, 1.0], np.float32), "tokens": np.array([3, 4])}
    answer = orjson.loads(rerank_codec.encode_documents("m", outputs, TextRerank(), request, "rid"))
    assert answer["results"] == [{"index": 1, "relevance_score": pytest.approx(0.7310586), "document": {"text": "b"}}]
    assert (answer["id"], answer["model"], answer["usage"]["total_tokens"]) == ("rid", "m", 7)
    raw = rerank_codec.parse_documents(body({"query": "q", "documents": ["a", "b"], "raw_scores": True}))
    answer = orjson.loads(rerank_codec.encode_documents("m", outputs, TextRerank(), raw, "rid"))
    assert answer["results"] == [{"index": 1, "relevance_score": 1.0}, {"index": 0, "relevance_score": 0.0}]


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ({"query": "q"}, "documents"),
        ({"query": "q", "documents": []}, "documents"),
        ({"query": "q", "documents": [{"text": "a", "id": 1}]}, "documents"),
        ({"query": "q", "documents": [3]}, "documents"),
        ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
        ({"query": "q", "documents": ["a"], "top_n": True}, "top_n"),
        ({"query": "q", "documents": ["a"], "rank_fields": ["x"]}, "rank_fields"),
    ],
)
def test_v1_rerank_refusals_name_the_field(value, param):
    assert refused(rerank_codec.parse_documents, value).param == param


def test_classify_answers_labels_best_first():
    declared = TextClassification(("a", "b", "c"))
    request = rerank_codec.parse_classify(body({"input": "text"}))
    assert request.inputs == TextInputs(["text"])
    outputs = {"logits": np.array([[0.0, 2.0, 1.0]], np.float32), "tokens": np.array([4])}
    answer = orjson.loads(rerank_codec.encode_classes("m", outputs, declared, request, "rid"))
    assert [entry["label"] for entry in answer["data"][0]] == ["b", "c", "a"]
    assert sum(entry["score"] for entry in answer["data"][0]) == pytest.approx(1.0)
    assert answer["object"] == "classify"


def test_scores_sigmoid_for_several_labels_and_stable_ties():
    sigmoid = TextClassification(("x", "y"), activation="sigmoid")
    [row] = labelled(np.array([[0.0, 0.0]]), sigmoid)
    assert row == [{"label": "x", "score": 0.5}, {"label": "y", "score": 0.5}]
    assert ranked(np.array([1.0, 1.0, 3.0]), raw=True, top=2) == [(2, 3.0), (0, 1.0)]


def test_a_prompt_name_on_a_model_without_prompts():
    with pytest.raises(ApiError, match="has no named prompts"):
        check_prompt(TextEmbedding(3), "query", "m")
    check_prompt(TextEmbedding(3), None, "m")


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/embed", {"error": "bad", "error_type": "Validation"}),
        ("/rerank", {"error": "bad", "error_type": "Validation"}),
        ("/v2/rerank", {"message": "bad"}),
        ("/classify", {"error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": "x"}}),
        ("/v1/rerank", {"error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": "x"}}),
        ("/predict", {"error": "bad", "input": "i"}),
    ],
)
def test_errors_answer_in_each_apis_shape(path, shape):
    assert orjson.loads(error_body_for(path, 400, "bad", reason="x", input="i", param="input")) == shape


def test_tei_error_types_follow_the_status():
    assert orjson.loads(error_body_for("/embed", 503, "full"))["error_type"] == "Overloaded"
    assert orjson.loads(error_body_for("/embed", 500, "bug"))["error_type"] == "Backend"
    assert orjson.loads(error_body_for("/embed", 413, "big"))["error_type"] == "Validation"
