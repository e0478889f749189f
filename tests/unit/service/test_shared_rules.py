"""The rules both front ends share: the API key and the request id read from HTTP headers
(bytes, as an ASGI scope holds them) and from gRPC metadata (str keys) alike."""

from __future__ import annotations

import os

import pytest

from inferpool.service.auth import ApiKey, presented_key
from inferpool.service.frontdoor import MAX_REQUEST_ID, client_request_id, request_ids

RULE = ApiKey("s3cret", frozenset({"/health/live", "/v2/health/live"}))


@pytest.mark.parametrize(
    "pairs",
    [
        [(b"authorization", b"Bearer s3cret")],
        [(b"authorization", b"bearer  s3cret ")],
        [(b"x-api-key", b"s3cret")],
        [("authorization", "Bearer s3cret")],
        [("x-api-key", " s3cret")],
        [("authorization", "Basic Zm9vOmJhcg=="), ("x-api-key", "s3cret")],
    ],
)
def test_the_key_is_read_alike_from_headers_and_metadata(pairs):
    assert RULE.admits("/predict", pairs)
    assert RULE.admits(None, pairs)


@pytest.mark.parametrize(
    "pairs",
    [
        [],
        [(b"authorization", b"s3cret")],  # no scheme
        [(b"authorization", b"Basic s3cret")],
        [(b"x-api-key", b"s3cre")],
        [("x-api-key", "s3cret"), ("x-api-key", "wrong")],  # the last one sent counts
        [("x-other", "s3cret")],
    ],
)
def test_a_missing_or_wrong_key_is_refused(pairs):
    assert not RULE.admits("/predict", pairs)
    assert not RULE.admits(None, pairs)


def test_exempt_paths_and_the_docs_need_no_key():
    for path in ("/health/live", "/v2/health/live", "/docs", "/openapi.json"):
        assert RULE.admits(path, [])
    assert not RULE.admits("/health/ready", [])


def test_a_non_ascii_key_matches_its_utf8_bytes_either_way():
    rule = ApiKey("clé", ())
    assert presented_key([("x-api-key", "clé")]) == "clé".encode()
    assert rule.admits(None, [("x-api-key", "clé")])
    assert rule.admits(None, [(b"x-api-key", "clé".encode())])


@pytest.mark.parametrize("name", [b"x-request-id", "x-request-id"])
def test_a_fit_request_id_is_taken_from_either_front_end(name):
    value = "trace-42" if isinstance(name, str) else b"trace-42"
    assert client_request_id([(name, value)]) == "trace-42"


@pytest.mark.parametrize("value", ["", "x" * (MAX_REQUEST_ID + 1), "line\nbreak"])
def test_an_unfit_request_id_is_not_echoed(value):
    assert client_request_id([("x-request-id", value)]) is None
    assert client_request_id([(b"x-request-id", value.encode())]) is None
    assert client_request_id([]) is None


def test_generated_ids_carry_the_process_and_count_on_their_serial():
    ids = request_ids(iter(range(3)), tag="g")
    made = [next(ids) for _ in range(3)]
    pid, started, serial = made[0].split("-")
    assert int(pid, 16) == os.getpid()
    assert started.startswith("g")
    assert serial == "0"
    assert [m.rsplit("-", 1)[1] for m in made] == ["0", "1", "2"]
