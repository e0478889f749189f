"""The text routes in TEI's, Cohere's and Infinity's shapes against the real server, serving the
three tiny text models of tests/support/text_models.py (an embedder, a cross-encoder and a
classifier) with an API key; scores, orders and labels checked against the same modules run
eagerly, and /v1/rerank and /v2/rerank called with Cohere's own client, unmodified."""

from __future__ import annotations

import cohere
import httpx2
import numpy as np
import openai
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import inferpool_serve, launch, wait_ready
from tests.support.text_models import (
    CLS,
    LABELS,
    MAX_SAMPLES,
    MAX_TOKENS,
    MODELS,
    SEP,
    reference_embeddings,
    reference_logits,
    reference_scores,
    word_id,
)

KEY = "text-routes-key"
QUERY = "What do llamas eat?"
TEXTS = [
    "Llamas eat grass and hay.",
    "The stock market fell today.",
    "What do llamas eat? Mostly grass, some hay, and leaves.",
    "Paris is the capital of France.",
    "A llama is a domesticated camelid from South America.",
]
LONG_TEXT = "Llamas wander the hills eating grass. " * 20  # far over MAX_TOKENS words
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    args = ("--models", MODELS, "--max-body-bytes", "65536")
    env = {"INFERPOOL_API_KEY": KEY}
    with launch(inferpool_serve(*args), tmp_path_factory.mktemp("logs"), ready_path="/health/live",
                ready_answer=None, env=env) as up:  # fmt: skip
        wait_ready(up, 120)
        yield up


def post(server, path: str, body: object, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.post(server.url + path, json=body, headers=AUTH if headers is None else headers, timeout=30)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def best_first(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def test_tei_rerank_matches_the_eager_cross_encoder(server):
    logits = reference_scores(QUERY, TEXTS)
    answer = post(server, "/rerank", {"query": QUERY, "texts": TEXTS, "return_text": True})
    assert answer.status_code == 200, answer.text
    ranked = answer.json()
    assert [r["index"] for r in ranked] == best_first(logits)
    np.testing.assert_allclose([r["score"] for r in ranked], sigmoid(logits)[best_first(logits)], rtol=1e-5)
    assert [r["text"] for r in ranked] == [TEXTS[i] for i in best_first(logits)]
    raw = post(server, "/rerank", {"query": QUERY, "texts": TEXTS, "raw_scores": True}).json()
    np.testing.assert_allclose([r["score"] for r in raw], logits[best_first(logits)], rtol=1e-5, atol=1e-6)
    assert all("text" not in r for r in raw)


def test_a_long_text_is_cut_never_the_query_unless_truncate_is_off(server):
    texts = [TEXTS[0], LONG_TEXT]
    answer = post(server, "/rerank", {"query": QUERY, "texts": texts, "raw_scores": True})
    assert answer.status_code == 200, answer.text
    by_index = {r["index"]: r["score"] for r in answer.json()}
    np.testing.assert_allclose([by_index[0], by_index[1]], reference_scores(QUERY, texts), rtol=1e-5, atol=1e-6)
    refused = post(server, "/rerank", {"query": QUERY, "texts": texts, "truncate": False})
    assert refused.status_code == 400
    assert refused.json()["error_type"] == "Validation"
    assert str(MAX_TOKENS) in refused.json()["error"]


def test_cohere_v2_client_reranks_at_its_own_path(server):
    logits = reference_scores(QUERY, TEXTS)
    with cohere.ClientV2(api_key=KEY, base_url=server.url, timeout=30) as client:
        answer = client.rerank(model="tiny-rerank", query=QUERY, documents=TEXTS, top_n=3)
    assert [r.index for r in answer.results] == best_first(logits)[:3]
    np.testing.assert_allclose(
        [r.relevance_score for r in answer.results], sigmoid(logits)[best_first(logits)][:3], rtol=1e-5
    )


def test_cohere_v1_client_reranks_with_documents_returned(server):
    logits = reference_scores(QUERY, TEXTS)
    with cohere.Client(api_key=KEY, base_url=server.url, timeout=30) as client:
        answer = client.rerank(model="tiny-rerank", query=QUERY, documents=TEXTS, return_documents=True)
    assert [r.index for r in answer.results] == best_first(logits)
    assert [r.document.text for r in answer.results] == [TEXTS[i] for i in best_first(logits)]


def test_v1_rerank_takes_documents_as_objects_and_names_no_model(server):
    documents = [{"text": t} for t in TEXTS[:3]]
    answer = post(server, "/v1/rerank", {"query": QUERY, "documents": documents, "top_n": 10})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["model"] == "tiny-rerank"
    assert len(body["results"]) == 3
    assert body["usage"]["total_tokens"] > 0
    assert "document" not in body["results"][0]


def test_cohere_client_errors_are_its_own_exceptions(server):
    with cohere.ClientV2(api_key=KEY, base_url=server.url, timeout=30) as client:
        with pytest.raises(cohere.BadRequestError) as refused:
            client.rerank(model="tiny-embed", query=QUERY, documents=TEXTS)
        assert "/v1/embeddings, /embed" in refused.value.body["message"]
        with pytest.raises(cohere.NotFoundError):
            client.rerank(model="nope", query=QUERY, documents=TEXTS)


def test_classify_matches_the_eager_classifier(server):
    texts = ["I love it.", "It is terrible.", "It is a chair."]
    answer = post(server, "/classify", {"model": "tiny-classify", "input": texts})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "classify"
    logits = reference_logits(texts)
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    for row, want in zip(body["data"], probabilities, strict=True):
        assert [entry["label"] for entry in row] == [LABELS[i] for i in best_first(want)]
        np.testing.assert_allclose([entry["score"] for entry in row], want[best_first(want)], rtol=1e-5)
    raw = post(server, "/v1/classify", {"input": texts[0], "raw_scores": True}).json()["data"][0]
    np.testing.assert_allclose(sorted(e["score"] for e in raw), sorted(logits[0]), rtol=1e-5, atol=1e-6)


def test_embed_with_prompts_and_unnormalized(server):
    units, raws = reference_embeddings(TEXTS[:2])
    answer = post(server, "/embed", {"inputs": TEXTS[:2]})
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json(), units, rtol=1e-5, atol=1e-6)
    one = post(server, "/embed", {"inputs": TEXTS[0], "normalize": False}).json()
    np.testing.assert_allclose(one, raws[:1], rtol=1e-5, atol=1e-6)
    prompted, _ = reference_embeddings(TEXTS[:2], "query: ")
    answer = post(server, "/embed", {"inputs": TEXTS[:2], "prompt_name": "query"}).json()
    np.testing.assert_allclose(answer, prompted, rtol=1e-5, atol=1e-6)


def test_openai_embeddings_take_the_prompt_name(server):
    prompted, _ = reference_embeddings(TEXTS[:2], "passage: ")
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=30) as client:
        answer = client.embeddings.create(
            model="tiny-embed", input=TEXTS[:2], encoding_format="float", extra_body={"prompt_name": "passage"}
        )
        np.testing.assert_allclose([d.embedding for d in answer.data], prompted, rtol=1e-5, atol=1e-6)
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="tiny-embed", input="x", extra_body={"prompt_name": "nope"})
        assert refused.value.param == "prompt_name"
        assert "'query', 'passage'" in refused.value.message


def test_tokenize_gives_ids_spans_and_special_tokens(server):
    answer = post(server, "/tokenize", {"inputs": "Hello, llamas", "model": "tiny-embed"})
    assert answer.status_code == 200, answer.text
    [tokens] = answer.json()
    assert [t["id"] for t in tokens] == [CLS, word_id("Hello"), word_id(","), word_id("llamas"), SEP]
    assert [(t["text"], t["start"], t["stop"], t["special"]) for t in tokens[1:4]] == [
        ("Hello", 0, 5, False),
        (",", 5, 6, False),
        ("llamas", 7, 13, False),
    ]
    assert tokens[0]["special"]
    assert tokens[0]["start"] is None
    bare = post(server, "/tokenize", {"inputs": ["a b", "c"], "add_special_tokens": False, "model": "tiny-embed"})
    assert [[t["text"] for t in row] for row in bare.json()] == [["a", "b"], ["c"]]


def test_several_models_of_a_kind_need_a_name(server):
    refused = post(server, "/tokenize", {"inputs": "x"})
    assert refused.status_code == 400
    assert "tiny-embed, tiny-rerank, tiny-classify" in refused.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/rerank", {"query": QUERY, "texts": []}, 400, "'texts'"),
        ("/rerank", {"query": " ", "texts": ["a"]}, 400, "'query'"),
        ("/rerank", {"query": QUERY, "texts": ["a"] * (MAX_SAMPLES + 1)}, 400, "max_request_samples"),
        ("/rerank", {"query": QUERY, "texts": ["a"], "top_n": 1}, 400, "'top_n'"),
        ("/rerank", {"query": QUERY, "texts": ["a"], "model": "tiny-classify"}, 400, "/classify"),
        ("/embed", {"inputs": ["ok", ""]}, 400, "'inputs' item 1"),
        ("/embed", {"inputs": "x", "prompt_name": "nope"}, 400, "'query', 'passage'"),
        ("/embed", {"inputs": "x", "truncation_direction": "Left"}, 400, "'truncation_direction'"),
        ("/v1/rerank", {"query": QUERY}, 400, "'documents'"),
        ("/v1/rerank", {"query": QUERY, "documents": [{"text": "a", "title": "b"}]}, 400, "'documents' item 0"),
        ("/v1/rerank", {"query": QUERY, "documents": ["a"] * (MAX_SAMPLES + 1)}, 400, "max_request_samples"),
        ("/v1/rerank", {"query": QUERY, "documents": ["a"], "model": "nope"}, 404, "['tiny-rerank']"),
        ("/classify", {"input": []}, 400, "'input'"),
        ("/classify", {"input": ["x"], "top_k": 1}, 400, "'top_k'"),
        ("/v1/classify", {"input": ["x"], "model": "tiny-embed"}, 400, "it serves /v1/embeddings, /embed"),
    ],
)
def test_bad_requests_name_the_field_in_the_apis_shape(server, path, body, status, field):
    answer = post(server, path, body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert field in message
    if path.startswith("/v1/") or path == "/classify":
        assert error["type"] == "invalid_request_error"


def test_a_body_over_the_limit_is_a_413(server):
    answer = post(server, "/rerank", {"query": QUERY, "texts": ["word " * 20000]})
    assert answer.status_code == 413
    assert answer.json()["error_type"] == "Validation"


def test_without_the_key_a_401_in_each_shape(server):
    tei = post(server, "/rerank", {"query": QUERY, "texts": TEXTS}, headers={})
    assert tei.status_code == 401
    assert set(tei.json()) == {"error", "error_type"}
    assert post(server, "/v2/rerank", {"query": QUERY, "documents": TEXTS}, headers={}).json().keys() == {"message"}
    assert post(server, "/v1/rerank", {"query": QUERY, "documents": TEXTS}, headers={}).json()["error"]["code"] == (
        "invalid_api_key"
    )


def test_counted_under_its_route_and_the_model(server):
    def scrape() -> str:
        return httpx2.get(server.url + "/metrics", timeout=10).text

    before = scrape()
    assert post(server, "/rerank", {"query": QUERY, "texts": TEXTS}).status_code == 200
    after = scrape()
    route = {"route": "/rerank", "status": "200"}
    assert metric_total(after, "inferpool_requests_total", **route) == (
        metric_total(before, "inferpool_requests_total", **route) + 1
    )
    model = {"model": "tiny-rerank"}
    assert metric_total(after, "inferpool_inference_seconds_count", **model) > metric_total(
        before, "inferpool_inference_seconds_count", **model
    )


def test_the_spec_narrows_each_route_to_its_models(server):
    spec = httpx2.get(server.url + "/openapi.json", timeout=10).json()
    body = spec["paths"]["/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["model"]["enum"] == ["tiny-rerank", None]
    assert body["properties"]["texts"]["maxItems"] == MAX_SAMPLES
    tokenize = spec["paths"]["/tokenize"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "model" in tokenize["required"]  # three models have a tokenizer


def test_the_deadline_header_is_held_as_on_every_route(server):
    headers = AUTH | {"X-Request-Timeout-Ms": "0"}
    answer = post(server, "/rerank", {"query": QUERY, "texts": TEXTS}, headers=headers)
    assert answer.status_code == 400
    assert "X-Request-Timeout-Ms" in answer.json()["error"]
    answer = post(
        server, "/v2/rerank", {"query": QUERY, "documents": TEXTS}, headers=AUTH | {"X-Request-Timeout-Ms": "5000"}
    )
    assert answer.status_code == 200, answer.text
    assert "server-timing" in answer.headers
