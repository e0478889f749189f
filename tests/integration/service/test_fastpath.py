"""The hot routes (/predict, /predict/{name}, v2 infer) answered by FastPath's raw ASGI
handlers, in-process: every documented behaviour, and that FastAPI's machinery is not used."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import orjson
import pytest
from fastapi.routing import APIRoute

from inferpool.service.http.fastpath import FastPath
from tests.integration.service.conftest import app_client, metric_total

KEY = "fast-key"
SAMPLE = np.zeros((1, 8, 8)).tolist()
V2_JSON = {"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]}


@pytest.fixture(scope="module")
def guarded():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INFERPOOL_API_KEY", KEY)
        with app_client("--cors-origins", '["https://app.example.com"]', "--max-body-bytes", "4096") as client:
            yield client


def authorised(**headers: str) -> dict[str, str]:
    return {"X-API-Key": KEY, **headers}


def test_the_hot_routes_never_reach_fastapi_routing(client, monkeypatch):
    # FastAPI's router raising on every call proves the hot routes go around it.
    def refuse(*_: object) -> None:
        raise AssertionError("the router was called for a hot route")

    monkeypatch.setattr(type(client.app.router), "__call__", refuse)
    assert client.post("/predict", json={"inputs": SAMPLE}).status_code == 200
    assert client.post("/v2/models/digits/infer", json=V2_JSON).status_code == 200
    assert client.post("/v2/models/digits/versions/1/infer", json=V2_JSON).status_code == 200


@pytest.mark.parametrize("path", ["/predict", "/predict/digits", "/v2/models/digits/infer"])
def test_the_key_is_required_on_every_hot_route(guarded, path):
    body = {"inputs": SAMPLE} if path.startswith("/predict") else V2_JSON
    missing = guarded.post(path, json=body)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"].startswith("missing or wrong API key")
    assert missing.headers["x-request-id"]
    assert guarded.post(path, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.post(path, json=body, headers=authorised()).status_code == 200


def test_cors_headers_on_a_hot_route(guarded):
    origin = {"Origin": "https://app.example.com"}
    response = guarded.post("/predict", json={"inputs": SAMPLE}, headers=authorised(**origin))
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://app.example.com"
    other = guarded.post("/predict", json={"inputs": SAMPLE}, headers=authorised(Origin="https://evil.example"))
    assert "access-control-allow-origin" not in other.headers


def test_request_id_and_server_timing(client):
    response = client.post("/predict/digits", json={"inputs": SAMPLE}, headers={"X-Request-Id": "hot-1"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "hot-1"
    assert response.headers["content-type"] == "application/json"
    phases = dict(re.findall(r"(\w+);dur=([\d.]+)", response.headers["server-timing"]))
    assert set(phases) == {"decode", "queue", "batch", "inference", "encode", "total"}
    assert float(phases["total"]) >= float(phases["inference"]) > 0
    generated = {client.post("/predict", json={"inputs": SAMPLE}).headers["x-request-id"] for _ in range(3)}
    assert len(generated) == 3  # unique, and unique against the other routes' ids too
    assert client.get("/health/live").headers["x-request-id"] not in generated


def test_v2_binary_answer_has_its_headers(client):
    header = orjson.dumps(
        {
            "inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32",
                        "parameters": {"binary_data_size": 256}}],
            "parameters": {"binary_data_output": True},
        }
    )  # fmt: skip
    response = client.post(
        "/v2/models/digits/infer",
        content=header + bytes(256),
        headers={"Inference-Header-Content-Length": str(len(header)), "X-Request-Id": "bin-1"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    length = int(response.headers["inference-header-content-length"])
    outputs = orjson.loads(response.content[:length])["outputs"]
    assert [o["name"] for o in outputs] == ["probabilities", "label"]
    assert len(response.content) == length + 10 * 4 + 8
    assert response.headers["x-request-id"] == "bin-1"
    assert "inference;dur=" in response.headers["server-timing"]


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "message"),
    [
        ("/predict/resnet", {"inputs": SAMPLE}, {}, 404, "model 'resnet' is not served here"),
        ("/v2/models/resnet/infer", V2_JSON, {}, 404, "model 'resnet' is not served here"),
        ("/v2/models/digits/versions/3/infer", V2_JSON, {}, 404, "has no version '3'"),
        ("/predict", {"inputs": [[1, 2]]}, {}, 400, "input 'image' has shape [1, 2]"),
        ("/predict", {"inputs": SAMPLE}, {"X-Request-Timeout-Ms": "soon"}, 400, "unsigned integer of milliseconds"),
        ("/v2/models/digits/infer", {"inputs": 3}, {}, 400, 'with an "inputs" list'),
        ("/predict", {"inputs": [0] * 40000}, {}, 413, "exceeds the limit of 65536 bytes"),
    ],
)
def test_errors_are_json_from_the_error_table(client, path, body, headers, status, message):
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]
    assert response.headers["x-request-id"]


@pytest.mark.parametrize("value", ["0.000001", "5e-324", "0"])
def test_a_deadline_under_a_millisecond_is_a_400_not_a_504(client, value):
    response = client.post("/predict", json={"inputs": SAMPLE}, headers={"X-Request-Timeout-Ms": value})
    assert response.status_code == 400
    assert "X-Request-Timeout-Ms" in response.json()["error"]


def test_not_ready_is_a_503_with_retry_after(client):
    host = client.app.state.host
    host.draining = True
    try:
        response = client.post("/predict", json={"inputs": SAMPLE})
    finally:
        host.draining = False
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.headers["connection"] == "close"
    assert "not ready" in response.json()["error"]


def test_metrics_label_by_route_template_and_count_the_door(client):
    def scrape() -> str:
        return client.get("/metrics").text

    before = scrape()
    client.post("/predict/digits", json={"inputs": SAMPLE})
    client.post("/predict/nope", json={"inputs": SAMPLE})
    client.post("/v2/models/digits/versions/1/infer", json=V2_JSON)
    after = scrape()

    def grew(route: str, status: str) -> float:
        labels = {"route": route, "status": status}
        return metric_total(after, "inferpool_requests_total", **labels) - metric_total(
            before, "inferpool_requests_total", **labels
        )

    assert grew("/predict/{name}", "200") == 1
    assert grew("/predict/{name}", "404") == 1
    assert grew("/v2/models/{name}/versions/{version}/infer", "200") == 1
    assert "/predict/nope" not in after  # never the raw path
    assert client.app.state.activity.active == 0  # every request counted in went out again


def test_the_declared_routes_keep_their_openapi_description(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert paths["/predict"]["post"]["summary"] == "Run the model on one sample or a batch"
    assert "{name}" in next(p for p in paths if p.startswith("/predict/"))
    assert paths["/v2/models/{name}/versions/{version}/infer"]["post"]["summary"] == "Inference (one version)"
    assert "404" in paths["/predict/{name}"]["post"]["responses"]


def test_fast_path_matches_only_the_hot_routes(client):
    fast = client.app._fast
    assert isinstance(fast, FastPath)
    assert sorted(route.path for route, _ in fast.routes) == [
        "/classify", "/embed", "/predict", "/predict/{name}", "/rerank", "/tokenize", "/v1/classify", "/v1/embeddings",
        "/v1/rerank",
        "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer", "/v2/rerank",
    ]  # fmt: skip
    assert all(isinstance(route, APIRoute) for route, _ in fast.routes)

    def matches(method: str, path: str) -> bool:
        return fast.match({"type": "http", "method": method, "path": path, "headers": []}) is not None

    assert matches("POST", "/predict")
    assert matches("POST", "/v1/embeddings")
    assert not matches("GET", "/v1/models")
    assert matches("POST", "/v2/models/a/versions/2/infer")
    assert not matches("GET", "/predict")
    assert not matches("POST", "/predict/")
    assert not matches("POST", "/predict/a/b")
    assert not matches("POST", "/v2/models/a/ready")


@pytest.mark.parametrize("path", ["/predict", "/v2/models/digits/infer"])
def test_a_client_that_leaves_mid_upload_is_counted_as_499_not_as_a_server_error(client, path):
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": b'{"inputs": [', "more_body": True}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"4000")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {},
    }  # fmt: skip
    before = client.get("/metrics").text
    asyncio.run(client.app(scope, receive, send))
    after = client.get("/metrics").text
    assert sent == []  # nobody to answer
    route = "/predict" if path == "/predict" else "/v2/models/{name}/infer"
    for status, grew in (("499", 1), ("500", 0)):
        labels = {"route": route, "status": status}
        change = metric_total(after, "inferpool_requests_total", **labels) - metric_total(
            before, "inferpool_requests_total", **labels
        )
        assert change == grew, (status, change)
