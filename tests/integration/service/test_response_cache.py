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
    from inferpool.service import frontdoor

    monkeypatch.setattr(frontdoor, "DOORKEEPER_UNDER_MS", 1)
    body = orjson.dumps({"inputs": np.full((1, 8, 8), 3.0).tolist()})
    hits, misses = _counts(cached)
    first, second = (cached.post("/predict", content=body) for _ in range(2))
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    assert _counts(cached) == (hits + 1, misses + 1)
