"""API-key auth and CORS, in-process."""

from __future__ import annotations

import pytest

from tests.integration.service.conftest import app_client

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def guarded(monkeypatch_module):
    monkeypatch_module.setenv("INFERPOOL_API_KEY", KEY)
    with app_client("--cors-origins", '["https://app.example.com"]') as client:
        yield client


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_predict_needs_the_key(guarded, images):
    body = {"inputs": images[0].tolist()}
    missing = guarded.post("/predict", json=body)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "missing or wrong API key" in missing.json()["error"]
    assert guarded.post("/predict", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert guarded.post("/predict", json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert guarded.post("/predict", json=body, headers={"X-API-Key": KEY}).status_code == 200
    assert guarded.get("/v2/models/digits").status_code == 401


def test_probes_and_metrics_are_exempt_and_count_refusals(guarded):
    assert guarded.get("/health/ready").status_code == 200
    assert guarded.get("/v2/health/live").status_code == 200
    metrics = guarded.get("/metrics").text
    assert 'inferpool_rejections_total{reason="auth"}' in metrics
    assert "s3cret" not in metrics


def test_cors_allows_only_the_named_origin(guarded):
    allowed = guarded.options(
        "/predict", headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"}
    )
    assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"
    other = guarded.options(
        "/predict", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert "access-control-allow-origin" not in other.headers


def test_the_spec_declares_401_where_the_key_is_required(guarded):
    paths = guarded.get("/openapi.json", headers={"X-API-Key": KEY}).json()["paths"]  # docs need the key too
    assert "401" in paths["/predict"]["post"]["responses"]
    assert "401" in paths["/v2/models/{name}/infer"]["post"]["responses"]
    assert "401" not in paths["/health/ready"]["get"]["responses"]
