"""The response cache and priorities the ASGI way (the app in-process: every request through the
middleware and the raw routes, none on the lane): the same bytes for a repeat on /predict and
v2, no-cache bypassing, a bad priority header a 400 on each infer route."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.integration.service.conftest import app_client, metric_total

SAMPLE = orjson.dumps({"inputs": np.ones((1, 8, 8)).tolist()})
V2 = {"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [1.0] * 64}]}
LOOKUPS = "inferpool_response_cache_total"


@pytest.fixture(scope="module")
def cached():
    with app_client("--response-cache-mb", "1", "--priority-levels", "2") as client:
        yield client


def _counts(client) -> tuple[float, float]:
    text = client.get("/metrics").text
    return metric_total(text, LOOKUPS, outcome="hit"), metric_total(text, LOOKUPS, outcome="miss")


def test_repeats_are_the_same_bytes_from_the_cache(cached):
    """The first request of its inputs only leaves a mark, the second is kept, the third hits."""
    hits, misses = _counts(cached)
    first, kept = (cached.post("/predict", content=SAMPLE) for _ in range(2))
    assert _counts(cached) == (hits, misses + 2)
    again = cached.post("/predict", content=SAMPLE, headers={"X-Request-Priority": "2"})
    assert first.status_code == kept.status_code == again.status_code == 200
    assert again.content == kept.content == first.content
    assert _counts(cached) == (hits + 1, misses + 2)
    v2 = [cached.post("/v2/models/digits/infer", json=V2) for _ in range(3)]
    assert v2[0].content == v2[1].content == v2[2].content != first.content
    bypassed = cached.post("/predict", content=SAMPLE, headers={"Cache-Control": "no-cache"})
    assert bypassed.content == first.content
    assert _counts(cached) == (hits + 2, misses + 4)


@pytest.mark.parametrize("path", ["/predict", "/v2/models/digits/infer"])
def test_a_bad_priority_header_is_a_400(cached, path):
    body = SAMPLE if path == "/predict" else orjson.dumps(V2)
    answer = cached.post(path, content=body, headers={"X-Request-Priority": "3"})
    assert answer.status_code == 400
    assert "X-Request-Priority 3 is not a level of this server" in answer.json()["error"]


def test_a_dear_models_answer_is_kept_at_its_first_sighting(cached, monkeypatch):
    """The doorkeeper only guards cheap models: under a bar that digits' 1 ms floor meets, the
    first request of its inputs is kept and the second hits."""
    from inferpool.service import cache_look

    monkeypatch.setattr(cache_look, "DOORKEEPER_UNDER_MS", 1)
    body = orjson.dumps({"inputs": np.full((1, 8, 8), 3.0).tolist()})
    hits, misses = _counts(cached)
    first, second = (cached.post("/predict", content=body) for _ in range(2))
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    assert _counts(cached) == (hits + 1, misses + 1)


def test_a_cheap_models_cache_looks_at_one_request_in_every_few_once_nothing_hits(cached, monkeypatch):
    """After QUIET looks without a hit only one request in EVERY is looked at (and counted); a
    request sent again and again is still kept and answered from the cache, and its hit makes
    the cache look at every request again."""
    from inferpool.service import cache_sampling

    monkeypatch.setattr(cache_sampling, "QUIET", 4)
    monkeypatch.setattr(cache_sampling, "EVERY", 4)
    bodies = [orjson.dumps({"inputs": np.full((1, 8, 8), 10.0 + i).tolist()}) for i in range(40)]
    for body in bodies[:4]:  # four new requests: four looks without a hit
        assert cached.post("/predict", content=body).status_code == 200
    hits, misses = _counts(cached)
    for body in bodies[4:36]:
        assert cached.post("/predict", content=body).status_code == 200
    assert _counts(cached) == (hits, misses + 32 // 4)
    answers = [cached.post("/predict", content=bodies[36]) for _ in range(12)]  # three looks among them
    assert len({answer.content for answer in answers}) == 1
    assert _counts(cached)[0] > hits  # kept at one look, answered from the cache at a later one
    _, misses = _counts(cached)
    for body in bodies[37:]:  # every request looked at again
        assert cached.post("/predict", content=body).status_code == 200
    assert _counts(cached)[1] == misses + 3
