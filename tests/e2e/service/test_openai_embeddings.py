"""OpenAI's embeddings API against the real server, called with the official ``openai`` client
(from PyPI, unmodified, ``base_url`` at the server): MiniLM as config/minilm.toml serves it, with
the digits model beside it (served, but no text embedding) and an API key set."""

from __future__ import annotations

import base64
import json

import httpx2
import numpy as np
import openai
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import REPO_ROOT, inferpool_serve, launch, wait_ready
from tests.support.minilm_reference import LONG, SENTENCES, cosines, reference, token_ids

KEY = "embeddings-key"
DIGITS = json.dumps({"source": "inferpool.engine.zoo.digits:build", "runtime": {"backend": "eager"}})
ARGS = ("--config", str(REPO_ROOT / "config" / "minilm.toml"), "--models", f"[{DIGITS}]")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    command = inferpool_serve(*ARGS)
    logs = tmp_path_factory.mktemp("logs")
    with launch(command, logs, ready_path="/health/live", ready_answer=None, env={"INFERPOOL_API_KEY": KEY}) as up:
        wait_ready(up, 180)
        yield up


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60) as opened:
        yield opened


def test_a_list_matches_sentence_transformers_with_usage_from_the_tokenizer(client):
    answer = client.embeddings.create(model="minilm", input=SENTENCES, encoding_format="float")
    assert [item.index for item in answer.data] == list(range(len(SENTENCES)))
    vectors = np.array([item.embedding for item in answer.data])
    assert vectors.shape == (len(SENTENCES), 384)
    assert cosines(vectors, reference()).min() >= 0.999
    assert answer.model == "minilm"
    counts = [len(ids) for ids in token_ids(SENTENCES)]
    assert counts[LONG] == 256  # cut where the model stops, as the server does
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == sum(counts)


def test_a_string_and_the_clients_default_encoding(client):
    """Without encoding_format the client asks for base64 and decodes it itself."""
    answer = client.embeddings.create(model="minilm", input=SENTENCES[1])
    assert len(answer.data) == 1
    assert cosines(answer.data[0].embedding, reference()[1]) >= 0.999
    assert answer.usage.prompt_tokens == len(token_ids([SENTENCES[1]])[0])


def test_base64_is_little_endian_float32(client):
    floats = client.embeddings.create(model="minilm", input=SENTENCES[:2], encoding_format="float")
    raw = client.embeddings.create(model="minilm", input=SENTENCES[:2], encoding_format="base64")
    for as_float, as_base64 in zip(floats.data, raw.data, strict=True):
        assert isinstance(as_base64.embedding, str)  # asked for explicitly, the client leaves it encoded
        decoded = np.frombuffer(base64.b64decode(as_base64.embedding), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(as_float.embedding, dtype=np.float32))


def test_dimensions_truncate_then_renormalise(client):
    answer = client.embeddings.create(model="minilm", input=SENTENCES, dimensions=128, encoding_format="float")
    vectors = np.array([item.embedding for item in answer.data])
    assert vectors.shape == (len(SENTENCES), 128)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosines(vectors, reference()[:, :128]).min() >= 0.999
    full = client.embeddings.create(model="minilm", input=SENTENCES[0], dimensions=384, encoding_format="float")
    assert cosines(full.data[0].embedding, reference()[0]) >= 0.999


def test_token_ids_embed_as_their_text_does(client):
    ids = token_ids(SENTENCES[:3])
    many = client.embeddings.create(model="minilm", input=ids, encoding_format="float")
    assert cosines([item.embedding for item in many.data], reference()[:3]).min() >= 0.999
    assert many.usage.prompt_tokens == sum(map(len, ids))
    one = client.embeddings.create(model="minilm", input=ids[1], encoding_format="float", user="someone")
    assert cosines(one.data[0].embedding, reference()[1]) >= 0.999


def test_models_list_and_retrieve_name_the_embedding_models_only(client):
    assert [model.id for model in client.models.list()] == ["minilm"]  # digits is served, embeds nothing
    model = client.models.retrieve("minilm")
    assert (model.id, model.object, model.owned_by) == ("minilm", "model", "inferpool")
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("digits")
    assert refused.value.code == "model_not_found"


@pytest.mark.parametrize("model", ["nope", "digits"])
def test_a_model_it_does_not_embed_with_is_not_found(client, model):
    with pytest.raises(openai.NotFoundError) as refused:
        client.embeddings.create(model=model, input="Hello.")
    error = refused.value
    assert (error.status_code, error.code, error.param, error.type) == (
        404,
        "model_not_found",
        "model",
        "invalid_request_error",
    )
    assert "['minilm']" in error.message


@pytest.mark.parametrize(
    ("call", "param", "words"),
    [
        ({"dimensions": 385}, "dimensions", "1 to 384"),
        ({"dimensions": 0}, "dimensions", "positive integer"),
        ({"input": ""}, "input", "empty"),
        ({"input": []}, "input", "not empty"),
        ({"input": [[101, 10**6, 102]]}, "input", "vocabulary"),
        ({"input": [list(range(1000, 1300))]}, "input", "1 to 256"),
        ({"encoding_format": "int8"}, "encoding_format", "'float' or 'base64'"),
        ({"extra_body": {"truncate": True}}, "truncate", "unrecognized request argument"),
    ],
)
def test_bad_requests_are_the_clients_bad_request_error(client, call, param, words):
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(**({"model": "minilm", "input": "Hello."} | call))
    error = refused.value
    assert (error.code, error.param, error.type) == ("invalid_input", param, "invalid_request_error")
    assert words in error.message


@pytest.mark.parametrize(("key", "headers"), [("wrong", {}), ("unsent", {"Authorization": openai.omit})])
def test_a_missing_or_wrong_key_is_the_clients_authentication_error(server, key, headers):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            stranger.embeddings.create(model="minilm", input="Hello.", extra_headers=headers)
        assert refused.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            stranger.models.list(extra_headers=headers)


def test_counted_under_its_route_and_the_model(server, client):
    def scrape() -> str:
        return httpx2.get(server.url + "/metrics", timeout=10).text

    before = scrape()
    client.embeddings.create(model="minilm", input=SENTENCES[:2])
    after = scrape()
    route = {"route": "/v1/embeddings", "status": "200"}
    assert (
        metric_total(after, "inferpool_requests_total", **route)
        == metric_total(before, "inferpool_requests_total", **route) + 1
    )
    samples = {"model": "minilm"}
    assert metric_total(after, "inferpool_inference_seconds_count", **samples) > metric_total(
        before, "inferpool_inference_seconds_count", **samples
    )


def test_errors_keep_the_services_shape_on_its_own_routes(server):
    answer = httpx2.post(server.url + "/predict", json={"inputs": ""}, headers={"X-API-Key": KEY}, timeout=30)
    assert answer.status_code == 400
    assert isinstance(answer.json()["error"], str)
    refused = httpx2.post(server.url + "/predict", json={"inputs": "x"}, timeout=30)
    assert refused.status_code == 401
    assert isinstance(refused.json()["error"], str)
