"""The response cache on a real server: a repeated request answered with the same bytes and
counted as a hit, ``Cache-Control: no-cache`` answered by the model, no answer crossing models,
versions or routes, a version loaded over the old one answering with its own outputs, and many
clients at once each getting their own answer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx2
import numpy as np
import orjson
import tritonclient.grpc as triton_grpc

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import Server, free_port, run_server, wait_ready
from tests.e2e.service.test_repository import add_version
from tests.support.text_models import MODELS as TEXT_MODELS

ONES = {"inputs": [[1.0, 1.0, 1.0, 1.0]]}
V2_ONES = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 1.0, 1.0, 1.0]}]}
HIT = "inferpool_response_cache_total"


def _post(server: Server, path: str, body: object, **headers: str) -> httpx2.Response:
    answer = httpx2.post(server.url + path, content=orjson.dumps(body), headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer


def _counts(server: Server, model: str) -> tuple[float, float]:
    text = httpx2.get(server.url + "/metrics", timeout=10).text
    return metric_total(text, HIT, model=model, outcome="hit"), metric_total(text, HIT, model=model, outcome="miss")


def test_repeats_hit_with_the_same_bytes_and_nothing_crosses_models_versions_or_routes(tmp_path, images):
    root = tmp_path / "repository"
    add_version(root, 1)
    (root / "scale" / "config.toml").write_text('version_policy = "all"')
    grpc_port = free_port()
    args = (
        "--model-repository", str(root), "--model-control-mode", "explicit", "--workers", "1",
        "--grpc-port", str(grpc_port), "--response-cache-mb", "4",
        "--runtime.backend", "eager", "--runtime.oversubscribe",
    )  # fmt: skip
    with run_server(tmp_path, *args) as server:
        wait_ready(server)
        # The first request of its inputs only leaves a mark, the second is kept, the third hits.
        first, kept, again = (_post(server, "/predict/scale", ONES) for _ in range(3))
        assert again.content == kept.content == first.content
        assert orjson.loads(first.content)["outputs"]["mul"] == [[1.0, 1.0, 1.0, 1.0]]
        assert _counts(server, "scale") == (1, 2)
        assert "inference;dur=0.000" not in kept.headers["server-timing"]
        assert "inference;dur=0.000" in again.headers["server-timing"]  # no model call

        bypassed = _post(server, "/predict/scale", ONES, **{"Cache-Control": "no-cache"})
        assert bypassed.content == first.content
        assert _counts(server, "scale") == (1, 2)  # not even looked up

        v2 = [_post(server, "/v2/models/scale/infer", V2_ONES) for _ in range(3)]  # another route: its own entry
        assert v2[0].content != first.content
        assert v2[2].content == v2[1].content == v2[0].content
        with_id = _post(server, "/v2/models/scale/infer", {**V2_ONES, "id": "mine"})  # seen inputs: kept at once
        assert orjson.loads(with_id.content)["id"] == "mine"
        assert _counts(server, "scale") == (2, 5)

        digits = [_post(server, "/predict", {"inputs": images[0].tolist()}) for _ in range(3)]
        assert digits[2].content == digits[1].content == digits[0].content
        assert _counts(server, "digits") == (1, 2)

        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        x = triton_grpc.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.ones((1, 4), np.float32))
        # The v2 requests' inputs: seen already, so the first is kept and the second hits.
        answers = [client.infer("scale", [x]).get_response() for _ in range(2)]
        assert answers[0] == answers[1]
        assert _counts(server, "scale") == (3, 6)

        add_version(root, 2)  # the new version serves: no answer of version 1 for it
        assert httpx2.post(server.url + "/v2/repository/models/scale/load", json={}, timeout=120).status_code == 200
        wait_ready(server)
        assert orjson.loads(_post(server, "/predict/scale", ONES).content)["outputs"]["mul"] == [[2.0] * 4]
        assert orjson.loads(_post(server, "/predict/scale", ONES).content)["outputs"]["mul"] == [[2.0] * 4]
        v1 = _post(server, "/v2/models/scale/versions/1/infer", V2_ONES)
        assert orjson.loads(v1.content)["outputs"][0]["data"] == [1.0] * 4
        assert client.infer("scale", [x]).as_numpy("mul")[0, 0] == 2.0
        client.close()
        text = httpx2.get(server.url + "/metrics", timeout=10).text
        assert metric_total(text, "inferpool_response_cache_bytes") > 0


def test_many_clients_at_once_each_get_their_own_answer(tmp_path, images, reference):
    """On worker threads: a hit on the lane is answered at once, a miss on a task (both here)."""
    args = (
        "--response-cache-mb", "0.05", "--workers", "1", "--runtime.num-runtimes", "2",  # a few dozen answers
        "--runtime.dispatch", "threads",
    )  # fmt: skip
    with run_server(tmp_path, *args) as server:
        wait_ready(server)
        _, labels = reference(images)

        def ask(i: int) -> tuple[int, int]:
            sample = i % len(images)
            with httpx2.Client(base_url=server.url, timeout=30) as http:
                answer = http.post("/predict", content=orjson.dumps({"inputs": images[sample].tolist()}))
            assert answer.status_code == 200, answer.text
            return sample, answer.json()["outputs"]["label"]

        with ThreadPoolExecutor(16) as pool:
            answered = list(pool.map(ask, range(400)))
        hits, misses = _counts(server, "digits")
        body = orjson.dumps({"inputs": images[3].tolist()})
        with httpx2.Client(base_url=server.url, timeout=30) as http:  # keep-alive: the lane's
            repeated = [http.post("/predict", content=body) for _ in range(3)]
        hits_after, _ = _counts(server, "digits")
    assert all(label == int(labels[sample]) for sample, label in answered)
    assert hits + misses == 400
    assert hits > 0
    assert len({answer.content for answer in repeated}) == 1
    assert all(answer.status_code == 200 for answer in repeated)
    assert hits_after - hits >= 2


def test_text_routes_hit_on_their_texts_and_an_answer_with_an_id_only_on_its_id(tmp_path):
    """TEI's /embed and /rerank answer the same texts with the same bytes; Infinity's /v1/rerank
    answers carry the request id, so only a repeat with the same X-Request-Id (a retry) hits."""
    with run_server(tmp_path, "--models", TEXT_MODELS, "--response-cache-mb", "1", "--workers", "1") as server:
        wait_ready(server, 120)
        embed = [_post(server, "/embed", {"inputs": ["Llamas eat grass."]}) for _ in range(3)]
        assert embed[0].content == embed[1].content == embed[2].content
        pairs = {"query": "What do llamas eat?", "texts": ["Grass.", "Stocks."]}
        rerank = [_post(server, "/rerank", pairs) for _ in range(3)]
        assert rerank[0].content == rerank[1].content == rerank[2].content
        documents = {"query": "What do llamas eat?", "documents": ["Grass.", "Stocks."]}
        fresh = [_post(server, "/v1/rerank", documents) for _ in range(2)]
        assert orjson.loads(fresh[0].content)["id"] != orjson.loads(fresh[1].content)["id"]
        # Its texts were seen (fresh): the first retry is kept, the second hits.
        retried = [_post(server, "/v1/rerank", documents, **{"X-Request-Id": "retry-1"}) for _ in range(2)]
        assert retried[0].content == retried[1].content
        assert orjson.loads(retried[1].content)["id"] == "retry-1"
        text = httpx2.get(server.url + "/metrics", timeout=10).text
    hits = metric_total(text, HIT, outcome="hit")
    misses = metric_total(text, HIT, outcome="miss")
    assert (hits, misses) == (3, 7)
