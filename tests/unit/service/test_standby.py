"""The standby server's answers while no serving process listens: the status, headers and JSON
shapes of the routes, written by the one raw error writer (service/apierror.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http import HTTPStatus

import httpx2
import orjson
import pytest

from inferpool.service.apierror import closing_error
from inferpool.service.processes.backlog_answers import Standby
from inferpool.service.readiness import Readiness


@pytest.fixture
def loading() -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    standby = Standby(listener, Readiness.LOADING)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        standby.stop()
        listener.close()


@pytest.mark.parametrize("path", ["/health/live", "/v2/health/live"])
def test_liveness_is_200_while_loading(loading, path):
    response = httpx2.get(loading + path)
    assert response.status_code == 200
    assert response.json() == {"status": "loading", "error": None}
    assert response.headers["content-type"] == "application/json"
    assert response.headers["connection"] == "close"
    assert "retry-after" not in response.headers


@pytest.mark.parametrize("path", ["/health/ready", "/v2/health/ready", "/v2/models/digits/ready"])
def test_readiness_is_503_with_the_health_shape(loading, path):
    response = httpx2.get(loading + path)
    assert response.status_code == 503
    assert response.json() == {"status": "loading", "error": "model is not ready (loading)"}
    assert response.headers["retry-after"] == "1"
    assert response.headers["connection"] == "close"


def test_other_routes_get_the_error_shape_and_their_body_is_read(loading):
    response = httpx2.post(loading + "/predict?x=1", content=b"{" * 100_000)
    assert response.status_code == 503
    assert response.json() == {"error": "model is not ready (loading)"}
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "1"


def test_head_gets_the_head_alone(loading):
    response = httpx2.head(loading + "/predict")
    assert response.status_code == 503
    assert response.content == b""
    assert int(response.headers["content-length"]) == len(orjson.dumps({"error": "model is not ready (loading)"}))


def test_the_raw_writer_frames_an_error_body():
    answer = closing_error(HTTPStatus.SERVICE_UNAVAILABLE, "busy", retry_after=True)
    head, body = answer.split(b"\r\n\r\n")
    assert head.split(b"\r\n") == [
        b"HTTP/1.1 503 Service Unavailable",
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"retry-after: 1",
        b"connection: close",
    ]
    assert orjson.loads(body) == {"error": "busy"}
