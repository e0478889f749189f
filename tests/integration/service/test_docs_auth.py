"""With an API key set, /docs still loads in a browser, its spec declares the key, and the
calls the page's Authorize button makes (either scheme) get through."""

from __future__ import annotations

import pytest

from tests.integration.service.conftest import app_client

KEY = "docs-key"
SAMPLE = [[[0.0] * 8] * 8]


@pytest.fixture(scope="module")
def keyed():
    with pytest.MonkeyPatch.context() as env:
        env.setenv("INFERPOOL_API_KEY", KEY)
        with app_client("--runtime.backend", "eager") as client:
            yield client


def test_docs_and_spec_load_without_the_key(keyed):
    page = keyed.get("/docs")
    assert page.status_code == 200
    assert "/openapi.json" in page.text
    assert keyed.get("/docs/oauth2-redirect").status_code == 200
    assert keyed.get("/openapi.json").status_code == 200


def test_spec_declares_the_key_where_it_is_needed(keyed):
    spec = keyed.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == schemes["bearer"] | {"type": "http", "scheme": "bearer"}
    assert schemes["apiKey"] == schemes["apiKey"] | {"type": "apiKey", "in": "header", "name": "X-API-Key"}
    predict = spec["paths"]["/predict"]["post"]
    assert predict["security"] == [{"bearer": []}, {"apiKey": []}]
    assert "401" in predict["responses"]
    assert "security" not in spec["paths"]["/health/ready"]["get"]  # exempt: probes send no key


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": f"Bearer {KEY}"}, 200),  # what Authorize sends for "bearer"
        ({"X-API-Key": KEY}, 200),  # and for "apiKey"
    ],
)
def test_calls_from_the_docs_page_need_the_key(keyed, headers, status):
    answer = keyed.post("/predict", json={"inputs": SAMPLE}, headers=headers)
    assert answer.status_code == status, answer.text
    if status == 401:
        assert answer.headers["www-authenticate"] == "Bearer"
        assert "error" in answer.json()
