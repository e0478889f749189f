"""The text routes that run a model on the lane (service/http/lane.py): a plain request is answered
from the HTTP parser's callbacks with the same bytes the ASGI path gives it (errors in each API's
shape, a model's refusal naming the route's field), and the requests for an inline model that one
loop wake-up completes share its calls: those of a length bucket stacked into one, each answered
with what it gets alone."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from inferpool.service.http import lane
from inferpool.service.http.fastpath import InferPoolApp
from tests.integration.service.conftest import app_client, metric_total
from tests.integration.service.test_lane import answered as answered  # both ways the lane answers
from tests.integration.service.test_lane import exchange, post, refuse_asgi, without_volatile
from tests.integration.service.test_lane_together import assert_as_alone, together
from tests.support.text_models import MODELS

QUERY = "What do llamas eat?"
SHORT = "Llamas eat grass."
MIDDLE = "What do llamas eat? Mostly grass and hay."
LONG = "Llamas wander the hills eating grass. " * 8  # over the tiny models' 32 tokens
# Padded to the tiny models' buckets (8, 16, 32 tokens, [CLS] and [SEP] included): SHORT alone to
# 8, MIDDLE to 16, LONG (cut) to 32; after the query (a pair), SHORT to 16 and MIDDLE to 32.


def inline_models() -> str:
    """The three tiny text models, run on the event loop (their calls can then be shared)."""
    entries = json.loads(MODELS)
    for entry in entries:
        entry["runtime"] = entry["runtime"] | {"dispatch": "inline"}
    return json.dumps(entries)


@pytest.fixture(scope="module")
def text_client() -> Iterator[TestClient]:
    with app_client("--models", inline_models(), "--max-body-bytes", "65536") as client:
        yield client


@pytest.fixture(scope="module")
def app(text_client: TestClient) -> InferPoolApp:
    found: InferPoolApp = text_client.app  # type: ignore[assignment]
    assert found.lane is not None
    return found


CASES = [
    ("/v1/embeddings", {"model": "tiny-embed", "input": [SHORT, MIDDLE]}, 200),
    ("/v1/embeddings", {"input": SHORT, "model": "tiny-embed", "encoding_format": "base64"}, 200),
    ("/v1/embeddings", {"input": SHORT, "model": "tiny-rerank"}, 404),
    ("/v1/embeddings", {"input": []}, 400),
    ("/embed", {"inputs": [SHORT, LONG], "normalize": False}, 200),
    ("/embed", {"inputs": LONG, "truncate": False}, 400),  # the model refuses it: a 400 naming 'inputs'
    ("/rerank", {"query": QUERY, "texts": [SHORT, MIDDLE], "return_text": True}, 200),
    ("/rerank", {"query": QUERY, "texts": [LONG], "truncate": False}, 400),
    ("/v1/rerank", {"query": QUERY, "documents": [SHORT, {"text": MIDDLE}], "top_n": 1}, 200),
    ("/v1/rerank", {"query": LONG, "documents": [SHORT]}, 400),  # OpenAI's shape, param 'documents'
    ("/v2/rerank", {"query": QUERY, "documents": [SHORT, MIDDLE], "return_documents": True}, 200),
    ("/classify", {"input": [SHORT, MIDDLE]}, 200),
    ("/v1/classify", {"input": SHORT, "raw_scores": True, "model": "tiny-embed"}, 400),
    ("/v1/classify", {"input": "", "nope": 1}, 400),
]


@pytest.mark.parametrize(("path", "body", "status"), CASES)
def test_a_text_route_answers_the_same_bytes_on_the_lane_as_the_asgi_way(app, path, body, status):
    sent = orjson.dumps(body)
    on_lane, _ = exchange(app, post(path, sent, "x-request-id: same"))
    asgi, _ = exchange(app, post(path, sent, "x-request-id: same", chunked=True))
    assert on_lane.startswith(b"HTTP/1.1 %d " % status), on_lane
    assert b"\r\nx-request-id: same\r\n" in on_lane
    assert without_volatile(on_lane) == without_volatile(asgi)


def test_a_models_refusal_names_the_routes_field(app):
    on_lane, _ = exchange(app, post("/v1/rerank", orjson.dumps({"query": LONG, "documents": [SHORT]})))
    error = orjson.loads(on_lane.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["param"] == "documents"
    assert error["type"] == "invalid_request_error"


def test_text_routes_never_meet_asgi_but_tokenize_does(app, monkeypatch):
    monkeypatch.setattr(InferPoolApp, "__call__", refuse_asgi)
    for path, body, status in CASES:
        answer, _ = exchange(app, post(path, orjson.dumps(body)))
        assert answer.startswith(b"HTTP/1.1 %d " % status), answer
    tokenized, _ = exchange(app, post("/tokenize", b'{"inputs": "x", "model": "tiny-embed"}'))
    assert tokenized.startswith(b"HTTP/1.1 500 "), tokenized  # refuse_asgi raised: it went the ASGI way


def embeddings(text: str, rid: str) -> bytes:
    return post("/v1/embeddings", orjson.dumps({"input": text, "model": "tiny-embed"}), f"x-request-id: {rid}")


def rerank(texts: list[str], rid: str, **more: object) -> bytes:
    return post("/rerank", orjson.dumps({"query": QUERY, "texts": texts, **more}), f"x-request-id: {rid}")


TOGETHER = [
    embeddings(SHORT, "e-short"),
    embeddings(MIDDLE, "e-middle"),
    rerank([SHORT], "r-short"),
    embeddings(LONG, "e-long"),
    embeddings("Llamas eat hay.", "e-short-2"),
    rerank([LONG], "r-refused", truncate=False),
    rerank(["Llamas eat hay.", "Grass."], "r-two"),
    post("/v1/embeddings", orjson.dumps({"input": "  ", "model": "tiny-embed"}), "x-request-id: e-blank"),
    embeddings(MIDDLE + " Hay too.", "e-middle-2"),
    rerank([MIDDLE], "r-middle"),
]
STATUSES = [b"200", b"200", b"200", b"200", b"200", b"400", b"200", b"400", b"200", b"200"]


class Calls:
    """Each model call's rows and token width, by model."""

    def __init__(self, app: InferPoolApp, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
        self.shapes: dict[str, list[tuple[int, ...]]] = {}
        for name in names:
            runtimes = app.state.host.get(name).runtimes
            monkeypatch.setattr(runtimes, "run", self._counted(name, runtimes.run))

    def _counted(self, name: str, run: Any) -> Any:
        def counted(arrays: Any) -> Any:
            self.shapes.setdefault(name, []).append(arrays["input_ids"].shape)
            return run(arrays)

        return counted


def test_a_wake_ups_text_requests_share_calls_by_length_bucket_and_each_gets_its_own_answer(app, monkeypatch):
    monkeypatch.setattr(lane, "EAGER_CONNECTIONS", 0)
    assert app.state.host.get("tiny-embed").inline
    alone = [together(app, [request])[0] for request in TOGETHER]
    calls = Calls(app, monkeypatch, "tiny-embed", "tiny-rerank")
    found = together(app, TOGETHER)
    statuses = [re.match(rb"HTTP/1.1 (\d+)", answer).group(1) for answer in found]  # type: ignore[union-attr]
    assert statuses == STATUSES
    # Two short texts share a bucket-of-8 call, two middle ones a bucket-of-16 one, the long text
    # (cut to 32 tokens) has its own; three pairs of 16 share one; the refused rerank and the blank
    # input never reach a call.
    assert sorted(calls.shapes["tiny-embed"]) == [(1, 32), (2, 8), (2, 16)]
    assert sorted(calls.shapes["tiny-rerank"]) == [(1, 32), (3, 16)]
    assert_as_alone(found, alone, TOGETHER)
    assert app.state.activity.active == 0


def test_the_metrics_count_each_text_request_under_its_route(app, text_client):
    def read() -> tuple[float, float]:
        text = text_client.get("/metrics").text
        return (
            metric_total(text, "inferpool_requests_total", route="/v1/embeddings", status="200"),
            metric_total(text, "inferpool_requests_total", route="/rerank", status="400"),
        )

    before = read()
    together(app, TOGETHER)
    after = read()
    assert after[0] - before[0] == 5
    assert after[1] - before[1] == 1
