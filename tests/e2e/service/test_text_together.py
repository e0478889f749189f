"""Hugging Face folders (a BERT embedder and a BERT cross-encoder, inline) against the real server, many
keep-alive connections sending ``/v1/embeddings`` and TEI's ``/rerank`` at once, texts of several
lengths: the requests that reach a serving process in one loop wake-up share model calls (those of a
length bucket stacked into one: service/inline_together.py), and each client still gets what it
gets alone -- the same vectors and scores, sentence-transformers' within tolerance, its own request
id, a bad request its own 400 in its API's shape -- while the metrics show calls of several samples."""

from __future__ import annotations

from pathlib import Path

import httpx2
import numpy as np
import orjson
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import run_server, wait_ready
from tests.e2e.service.test_inline_together import at_once
from tests.support import hf_folders as reference
from tests.support.hf_folders import QUERY, TEXTS

CONNECTIONS = 32
ROUNDS = 8
TOO_LONG = "serving " * 400  # over either folder's token limit
BAD_EMBEDDINGS = orjson.dumps({"model": "bert-embedder", "input": [[10**6]]})  # no such token id
BAD_RERANK = orjson.dumps({"query": QUERY, "texts": [TOO_LONG], "truncate": False})


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {kind: reference.write(root, "bert", kind) for kind in ("embedder", "cross-encoder")}


@pytest.fixture(scope="module")
def server(tmp_path_factory, folders):
    config = folders["embedder"].parent / "serve.toml"
    # Inline, as a text model whose call auto measures short runs (grouping needs it; worker threads run each alone).
    config.write_text(
        f'[[models]]\nsource = "{folders["cross-encoder"].name}"\n[models.runtime]\ndispatch = "inline"\n'
    )
    args = ("--config", str(config), "--model", str(folders["embedder"]), "--runtime.dispatch", "inline")
    with run_server(tmp_path_factory.mktemp("logs"), *args, ready_timeout=300) as running:
        wait_ready(running, 300)
        yield running


def embeddings(text: str) -> tuple[str, bytes]:
    return "/v1/embeddings", orjson.dumps({"model": "bert-embedder", "input": text})


def rerank(text: str) -> tuple[str, bytes]:
    return "/rerank", orjson.dumps({"query": QUERY, "texts": [text], "raw_scores": True})


def sent_by(at: int, round_: int) -> tuple[str, bytes, int]:
    """What connection ``at`` sends in ``round_``: (path, body, which of TEXTS; -1 for a bad one)."""
    text = (at + round_) % len(TEXTS)
    if at % 8 == 7:
        return ("/v1/embeddings", BAD_EMBEDDINGS, -1) if round_ % 2 else ("/rerank", BAD_RERANK, -1)
    return (*(embeddings if at % 2 else rerank)(TEXTS[text]), text)


def answered(found: dict | list) -> np.ndarray:
    """The embedding, or the rerank's one raw score, of an answer."""
    if isinstance(found, dict):
        return np.asarray(found["data"][0]["embedding"], dtype=np.float64)
    return np.asarray([found[0]["score"]], dtype=np.float64)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_many_connections_at_once_get_what_each_gets_alone(server, folders):
    for name in ("bert-embedder", "bert-cross-encoder"):
        assert httpx2.get(f"{server.url}/v2/models/{name}/config", timeout=30).json()["dispatch"] == "inline"
    alone: dict[bytes, np.ndarray] = {}
    for each in TEXTS:
        for path, body in (embeddings(each), rerank(each)):
            reply = httpx2.post(server.url + path, content=body, timeout=60)
            assert reply.status_code == 200, reply.text
            alone[body] = answered(reply.json())
    want_embeddings = reference.encode(folders["embedder"])
    want_scores = reference.cross_encoder_logits(folders["cross-encoder"])
    before = httpx2.get(f"{server.url}/metrics", timeout=30).text
    for path, body, text, status, answer in at_once(server.port, CONNECTIONS, ROUNDS, sent_by):
        if text < 0:
            assert status == 400, answer
            error = orjson.loads(answer)
            if path == "/rerank":  # TEI's shape
                assert error["error_type"] == "Validation"
                assert "truncation" in error["error"]
            else:  # OpenAI's, naming the field
                assert error["error"]["param"] == "input"
                assert "vocabulary" in error["error"]["message"]
            continue
        assert status == 200, answer
        got = answered(orjson.loads(answer))
        if path == "/v1/embeddings":
            assert cosine(got, alone[body]) >= 0.999
            assert cosine(got, want_embeddings[text]) >= 0.999
        else:
            np.testing.assert_allclose(got, alone[body], atol=1e-4)
            np.testing.assert_allclose(got, want_scores[text : text + 1], atol=1e-4)
    after = httpx2.get(f"{server.url}/metrics", timeout=30).text
    calls, samples = (
        metric_total(after, name) - metric_total(before, name)
        for name in ("inferpool_batch_size_count", "inferpool_batch_size_sum")
    )
    assert calls > 0
    assert samples / calls > 1.2  # requests rode in calls of several samples: theirs and their neighbours'
