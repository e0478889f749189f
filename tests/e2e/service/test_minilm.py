"""MiniLM embeddings against the real server, served by config/minilm.toml as documented."""

from __future__ import annotations

import httpx2
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from inferpool.harness.server import REPO_ROOT, free_port, run_server, wait_ready
from tests.support.minilm_reference import LONG, SENTENCES, cosines, reference, token_ids

CONFIG = str(REPO_ROOT / "config" / "minilm.toml")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The MiniLM server and its gRPC address."""
    grpc_port = free_port()
    args = ("--config", CONFIG, "--grpc-port", str(grpc_port))
    with run_server(tmp_path_factory.mktemp("logs"), *args, ready_timeout=120) as running:
        wait_ready(running, 120)
        yield running, f"127.0.0.1:{grpc_port}"


@pytest.fixture(scope="module")
def server(served):
    return served[0]


def test_batch_and_single_match_sentence_transformers(server):
    answer = httpx2.post(server.url + "/predict", json={"inputs": SENTENCES}, timeout=60)
    assert answer.status_code == 200, answer.text
    outputs = answer.json()["outputs"]
    assert np.asarray(outputs["embedding"]).shape == (len(SENTENCES), 384)
    assert cosines(outputs["embedding"], reference()).min() >= 0.999
    assert outputs["truncated"] == [i == LONG for i in range(len(SENTENCES))]
    assert outputs["tokens"][LONG] == 256
    one = httpx2.post(server.url + "/predict", json={"inputs": SENTENCES[1]}, timeout=60).json()["outputs"]
    assert len(one["embedding"]) == 384
    assert one["truncated"] is False
    assert cosines(one["embedding"], reference()[1]) >= 0.999


def test_v2_bytes_input_json_and_binary(server):
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(SENTENCES)], "data": SENTENCES}]}
    answer = httpx2.post(server.url + "/v2/models/minilm/infer", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    assert outputs["embedding"]["shape"] == [len(SENTENCES), 384]
    assert cosines(np.reshape(outputs["embedding"]["data"], (-1, 384)), reference()).min() >= 0.999
    assert outputs["truncated"]["data"] == [i == LONG for i in range(len(SENTENCES))]
    # Binary: each element a 4-byte little-endian length, then its UTF-8 bytes (Triton's layout).
    blob = b"".join(len(s.encode()).to_bytes(4, "little") + s.encode() for s in SENTENCES[:2])
    header = (
        b'{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], '
        b'"parameters": {"binary_data_size": %d}}]}' % len(blob)
    )
    answer = httpx2.post(
        server.url + "/v2/models/minilm/infer",
        content=header + blob,
        headers={"Inference-Header-Content-Length": str(len(header))},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    embedding = next(o for o in answer.json()["outputs"] if o["name"] == "embedding")
    assert cosines(np.reshape(embedding["data"], (-1, 384)), reference()[:2]).min() >= 0.999


def test_v2_metadata_and_openapi_describe_text(server):
    meta = httpx2.get(server.url + "/v2/models/minilm", timeout=10).json()
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    spec = httpx2.get(server.url + "/openapi.json", timeout=10).json()
    request = spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "string" in str(request["properties"]["inputs"])


@pytest.mark.parametrize(
    ("inputs", "message"),
    [("", "empty"), (["ok", "  "], "text 1 is empty"), ([[1, 2]], "must be a string"), (3, "non-empty string")],
)
def test_empty_or_non_text_is_a_clear_400(server, inputs, message):
    answer = httpx2.post(server.url + "/predict", json={"inputs": inputs}, timeout=30)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]
    bad = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [""]}]}
    answer = httpx2.post(server.url + "/v2/models/minilm/infer", json=bad, timeout=30)
    assert answer.status_code == 400
    assert "empty" in answer.json()["error"]


def test_grpc_bytes_input_with_tritonclient(served):
    """Sentences as a BYTES tensor over gRPC (Triton's client sends them raw, each element
    length-prefixed), embeddings and flags back as raw contents."""
    with triton_grpc.InferenceServerClient(served[1]) as client:
        meta = client.get_model_metadata("minilm")
        assert [(t.name, t.datatype) for t in meta.inputs] == [("text", "BYTES")]
        text = triton_grpc.InferInput("text", [len(SENTENCES)], "BYTES")
        text.set_data_from_numpy(np.array([s.encode() for s in SENTENCES], dtype=object))
        result = client.infer("minilm", [text])
    assert cosines(result.as_numpy("embedding"), reference()).min() >= 0.999
    assert result.as_numpy("truncated").tolist() == [i == LONG for i in range(len(SENTENCES))]


def test_tei_embed_matches_sentence_transformers(server):
    answer = httpx2.post(server.url + "/embed", json={"inputs": SENTENCES}, timeout=60)
    assert answer.status_code == 200, answer.text
    vectors = np.asarray(answer.json())
    assert vectors.shape == (len(SENTENCES), 384)
    assert cosines(vectors, reference()).min() >= 0.999
    one = httpx2.post(server.url + "/embed", json={"inputs": SENTENCES[1], "truncate": True}, timeout=60).json()
    assert len(one) == 1
    assert cosines(one[0], reference()[1]) >= 0.999


def test_tei_embed_without_normalize_is_the_pooled_vector(server):
    answer = httpx2.post(server.url + "/embed", json={"inputs": SENTENCES[:2], "normalize": False}, timeout=60)
    assert answer.status_code == 200, answer.text
    raw = np.asarray(answer.json(), dtype=np.float32)
    norms = np.linalg.norm(raw, axis=1)
    assert (np.abs(norms - 1.0) > 0.05).all()  # mean-pooled hidden states, not unit vectors
    assert cosines(raw / norms[:, None], reference()[:2]).min() >= 0.999


def test_tei_tokenize_gives_the_tokenizers_ids(server):
    answer = httpx2.post(server.url + "/tokenize", json={"inputs": SENTENCES}, timeout=60)
    assert answer.status_code == 200, answer.text
    rows = answer.json()
    assert [[token["id"] for token in row] for row in rows] == token_ids(SENTENCES)
    first = rows[1][1]  # "The", after [CLS]
    assert (first["text"], first["start"], first["stop"], first["special"]) == ("The", 0, 3, False)
    assert rows[1][0]["special"]
    assert rows[1][0]["start"] is None


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/embed", {"inputs": SENTENCES[LONG], "truncate": False}, "longer than the model's 256 tokens"),
        ("/embed", {"inputs": "Hi.", "prompt_name": "query"}, "has no named prompts"),
        ("/rerank", {"query": "Hi.", "texts": ["Hello."]}, "/v1/embeddings, /embed, /tokenize"),
        ("/classify", {"input": ["Hi."]}, "minilm: /v1/embeddings, /embed, /tokenize"),
    ],
)
def test_what_minilm_cannot_do_is_a_400_naming_why(server, path, body, words):
    answer = httpx2.post(server.url + path, json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert words in (error if isinstance(error, str) else error["message"])
