"""Hostile input against the real server, over real HTTP: every answer is a JSON 4xx naming
what was wrong, never a 5xx, and the server serves a valid request right after each case.

Headers that httpx refuses to send (non-ASCII bytes) go over a raw socket.
"""

from __future__ import annotations

import gzip
import json
import socket
import zlib
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx2
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import Server, run_server, wait_ready

LIMIT = 65536
IMAGE = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32"}
V2 = "/v2/models/digits/infer"
V2_BODY = {"inputs": [IMAGE | {"data": [0.0] * 64}]}
SAMPLE = [[[0.0] * 8] * 8]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    args = ("--workers", "1", "--runtime.backend", "eager", "--max-body-bytes", str(LIMIT))
    with run_server(tmp_path_factory.mktemp("hostile"), *args) as running:
        wait_ready(running)
        yield running
        # After every case: nothing was an internal error, in the metrics or in the log.
        metrics = httpx2.get(running.url + "/metrics").text
        assert metric_total(metrics, "inferpool_failures_total", reason="internal") == 0
        assert "Traceback" not in running.output()


def raw_request(server: Server, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, dict, bytes]:
    """One POST over a fresh socket, headers sent byte for byte: (status, headers, body)."""
    address = urlsplit(server.url)
    head = [b"POST %s HTTP/1.1" % path.encode(), b"Host: %s" % address.netloc.encode(), b"Connection: close"]
    head += [b"%s: %s" % pair for pair in headers]
    head.append(b"Content-Length: %d" % len(body))
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    header_block, _, content = received.partition(b"\r\n\r\n")
    status_line, *lines = header_block.split(b"\r\n")
    fields = {name.strip().lower(): value.strip() for name, _, value in (line.partition(b":") for line in lines)}
    return int(status_line.split()[1]), fields, content


def assert_json_error(status: int, content_type: str | bytes, body: bytes, want: int, *named: str) -> str:
    assert status == want, body
    assert content_type in ("application/json", b"application/json")
    message = json.loads(body)["error"]
    for name in named:
        assert name in message
    return message


def assert_still_serving(server: Server) -> None:
    assert httpx2.post(server.url + "/predict", json={"inputs": SAMPLE}).status_code == 200
    assert httpx2.post(server.url + V2, json=V2_BODY).status_code == 200


ODD_NUMBERS = [
    b"\xc2\xb2",  # "²" in UTF-8: a digit to str.isdigit(), not to int()
    b"\xb2",  # the same in latin-1
    b"\xd9\xa5",  # ARABIC-INDIC DIGIT FIVE
    b"+276",
    b"-1",
    b"2 76",
    b"1e2",
    b"0x10",
    b"1_000",
    b"9" * 400,  # past int()'s 4300-digit limit for the header length, inf for the timeout
    b"9" * 5000,
]


@pytest.mark.parametrize("value", ODD_NUMBERS, ids=repr)
def test_odd_inference_header_content_length_is_a_400_naming_it(server, value):
    body = json.dumps(V2_BODY).encode()
    status, headers, content = raw_request(server, V2, [(b"Inference-Header-Content-Length", value)], body)
    assert_json_error(status, headers[b"content-type"], content, 400, "Inference-Header-Content-Length")
    assert_still_serving(server)


@pytest.mark.parametrize("value", [*ODD_NUMBERS[:6], b"1_000", b"nan", b"inf", b"0", b"9" * 400], ids=repr)
@pytest.mark.parametrize("path", ["/predict", V2])
def test_odd_timeout_header_is_a_400_naming_it(server, path, value):
    body = json.dumps({"inputs": SAMPLE} if path == "/predict" else V2_BODY).encode()
    status, headers, content = raw_request(server, path, [(b"X-Request-Timeout-Ms", value)], body)
    assert_json_error(status, headers[b"content-type"], content, 400, "X-Request-Timeout-Ms")
    assert_still_serving(server)


def v2_with(**changes: object) -> dict:
    return {"inputs": [IMAGE | {"data": [0.0] * 64} | changes]}


WRONG_TYPES = [
    (v2_with(name=5), "'name'"),
    (v2_with(datatype=["FP32"]), "datatype"),
    (v2_with(datatype=None), "datatype"),
    (v2_with(shape=[1, True, 8, 8]), "'shape'"),
    (v2_with(shape=[1, 1.5, 8, 8]), "'shape'"),  # 1.0 is an integer to JSON (and JSON Schema)
    (v2_with(shape=[1, None, 8, 8]), "'shape'"),
    (v2_with(shape=[[1], 1, 8, 8]), "'shape'"),
    (v2_with(shape="1,1,8,8"), "'shape'"),
    (v2_with(data=[True] * 64), "input 'image'"),
    (v2_with(data=[None] * 64), "input 'image'"),
    (v2_with(data=["0"] * 64), "input 'image'"),
    (v2_with(data=[[0.0] * 8] * 7 + [[0.0] * 7]), "input 'image'"),  # ragged
    (v2_with(data={"values": [0.0] * 64}), "input 'image'"),
    (v2_with(parameters={"binary_data_size": True}), "binary_data_size"),
    (v2_with(parameters=[]), "parameters"),
    (V2_BODY | {"id": 5}, "'id'"),
    (V2_BODY | {"id": ["a"]}, "'id'"),
    (V2_BODY | {"parameters": {"timeout": True}}, "'timeout'"),
    (V2_BODY | {"parameters": {"timeout": "100"}}, "'timeout'"),
    (V2_BODY | {"parameters": {"timeout": 1.5}}, "'timeout'"),
    (V2_BODY | {"parameters": {"timeout": [100]}}, "'timeout'"),
    (V2_BODY | {"parameters": {"timeout": 10**30}}, "'timeout'"),  # a float once parsed: beyond uint64
    (V2_BODY | {"parameters": {"binary_data_output": "true"}}, "binary_data_output"),
    (V2_BODY | {"parameters": {"binary_data_output": 1}}, "binary_data_output"),
    (V2_BODY | {"outputs": [{"name": "label", "parameters": {"binary_data": None}}]}, "binary_data"),
    (V2_BODY | {"outputs": [{"name": ["label"]}]}, "'name'"),
    (V2_BODY | {"outputs": {"name": "label"}}, '"outputs"'),
    ({"inputs": {"image": [0.0] * 64}}, '"inputs"'),
]


@pytest.mark.parametrize(("body", "named"), WRONG_TYPES, ids=[repr(b)[-60:] for b, _ in WRONG_TYPES])
def test_v2_json_of_the_wrong_type_is_a_400_naming_the_field(server, body, named):
    response = httpx2.post(server.url + V2, content=json.dumps(body))
    assert_json_error(response.status_code, response.headers["content-type"], response.content, 400, named)
    assert_still_serving(server)


@pytest.mark.parametrize("inputs", [True, None, "image", 1e300, {"image": {"a": 1}}, {"image": [[[None] * 8] * 8]}])
def test_predict_json_of_the_wrong_type_is_a_400_naming_the_input(server, inputs):
    response = httpx2.post(server.url + "/predict", json={"inputs": inputs})
    assert_json_error(response.status_code, response.headers["content-type"], response.content, 400, "'image'")
    assert_still_serving(server)


STRICT_V2 = [
    (v2_with(datatype="FP64"), "datatype FP64 is not the model's; send FP32"),
    (v2_with(datatype="INT64", data=[0] * 64), "datatype INT64 is not the model's"),
    (v2_with(datatype="BYTES", data=["0"] * 64), "datatype BYTES is not the model's"),
    (v2_with(shape=[1, 64]), "has shape [1, 64]; the model takes [-1, 1, 8, 8]"),
    (v2_with(shape=[1, 8, 8]), "has shape [1, 8, 8]; the model takes [-1, 1, 8, 8]"),
    (v2_with(shape=[1, 1, 1, 8, 8]), "has shape [1, 1, 1, 8, 8]"),
    (v2_with(shape=[1, 2, 4, 8]), "has shape [1, 2, 4, 8]"),
    ({"inputs": [IMAGE | {"data": [0.0] * 64}, IMAGE | {"data": [1.0] * 64}]}, "input 'image' is given twice"),
    (v2_with(data=[0.5] * 64, datatype="FP32") | {"parameters": {"timeout": -5}}, "'timeout'"),
]


@pytest.mark.parametrize(("body", "message"), STRICT_V2, ids=[m for _, m in STRICT_V2])
def test_v2_is_as_strict_as_triton(server, body, message):
    response = httpx2.post(server.url + V2, content=json.dumps(body))
    assert message in assert_json_error(response.status_code, response.headers["content-type"], response.content, 400)
    assert_still_serving(server)


@pytest.mark.parametrize("path", ["/predict", V2])
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "GZIP", "identity"])
def test_compressed_bodies_are_decoded(server, path, encoding):
    body = json.dumps({"inputs": SAMPLE} if path == "/predict" else V2_BODY).encode()
    compressors: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "deflate": zlib.compress}
    compress = compressors.get(encoding.lower(), bytes)
    sent = httpx2.post(server.url + path, content=compress(body), headers={"Content-Encoding": encoding})
    plain = httpx2.post(server.url + path, content=body)
    assert sent.status_code == 200, sent.text
    assert sent.json() == plain.json()


def test_a_zip_bomb_is_a_413_after_decompression(server):
    bomb = gzip.compress(b" " * (LIMIT * 100))  # 6.5 MB of whitespace in ~6 kB
    assert len(bomb) < LIMIT
    for path in ("/predict", V2):
        response = httpx2.post(server.url + path, content=bomb, headers={"Content-Encoding": "gzip"})
        message = assert_json_error(response.status_code, response.headers["content-type"], response.content, 413)
        assert f"inflates to more than the limit of {LIMIT} bytes" in message
    # Exactly at the limit still passes the size check (and is then judged as JSON).
    padded = json.dumps({"inputs": SAMPLE}).encode().ljust(LIMIT)
    response = httpx2.post(server.url + "/predict", content=gzip.compress(padded), headers={"Content-Encoding": "gzip"})
    assert response.status_code == 200
    assert_still_serving(server)


@pytest.mark.parametrize(
    ("encoding", "body", "status", "message"),
    [
        ("br", b"\x0b\x02\x80{}\x03", 415, "Content-Encoding 'br' is not supported"),
        ("gzip, deflate", b"{}", 415, "'gzip, deflate' is not supported"),
        ("compress", b"{}", 415, "not supported"),
        ("gzip", json.dumps(V2_BODY).encode(), 400, "not valid gzip data"),
        ("gzip", gzip.compress(json.dumps(V2_BODY).encode())[:-12], 400, "compressed data ends early"),
        ("deflate", gzip.compress(b"{}"), 400, "not valid deflate data"),
        ("gzip", gzip.compress(b"{}") + b"trailing", 400, "not valid gzip data"),
    ],
)
def test_other_or_broken_encodings_are_refused(server, encoding, body, status, message):
    for path in ("/predict", V2):
        response = httpx2.post(server.url + path, content=body, headers={"Content-Encoding": encoding})
        assert message in assert_json_error(
            response.status_code, response.headers["content-type"], response.content, status
        )
    assert_still_serving(server)
