"""Open Inference Protocol v2 against the real server, with Triton's own unmodified client."""

from __future__ import annotations

import json
import socket
import time
from typing import BinaryIO

import httpx2
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from inferpool.harness.payloads import v2_request
from inferpool.harness.server import run_server, wait_ready


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("v2")) as running:
        wait_ready(running)
        yield running


@pytest.fixture
def client(server):
    http = triton.InferenceServerClient(server.url.removeprefix("http://"))
    yield http
    http.close()


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("digits")
    assert client.is_model_ready("digits", "1")
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
    meta = client.get_model_metadata("digits")
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert [(o["name"], o["datatype"], o["shape"]) for o in meta["outputs"]] == [
        ("probabilities", "FP32", [-1, 10]),
        ("label", "INT64", [-1]),
    ]


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
@pytest.mark.parametrize("batch", [1, 5])
def test_infer_matches_eager(client, images, reference, binary_in, binary_out, batch):
    x = images[:batch]
    tensor = triton.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary_in)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary_out) for n in ("probabilities", "label")]
    result = client.infer("digits", [tensor], outputs=outputs, request_id="req-7")
    probabilities, label = reference(x)
    np.testing.assert_allclose(result.as_numpy("probabilities"), probabilities, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(result.as_numpy("label"), label)
    assert result.as_numpy("label").dtype == np.int64
    assert result.get_response()["id"] == "req-7"
    assert result.get_response()["model_version"] == "1"


def test_output_selection_and_default_binary_output(client, images, reference):
    tensor = triton.InferInput("image", [2, 1, 8, 8], "FP32")
    tensor.set_data_from_numpy(images[:2])
    only_label = client.infer("digits", [tensor], outputs=[triton.InferRequestedOutput("label")])
    assert [o["name"] for o in only_label.get_response()["outputs"]] == ["label"]
    everything = client.infer("digits", [tensor])  # the client then asks for binary_data_output
    np.testing.assert_array_equal(everything.as_numpy("label"), reference(images[:2])[1])
    assert everything.as_numpy("probabilities").shape == (2, 10)


def test_client_sees_clear_errors(client, images):
    tensor = triton.InferInput("image", [1, 1, 8, 8], "FP32")
    tensor.set_data_from_numpy(images[:1])
    with pytest.raises(InferenceServerException, match="model 'resnet' is not served here") as info:
        client.infer("resnet", [tensor])
    assert info.value.status() == "404"
    with pytest.raises(InferenceServerException, match="has no version '3'"):
        client.infer("digits", [tensor], model_version="3")
    wrong = triton.InferInput("image", [1, 64], "FP32")
    wrong.set_data_from_numpy(images[:1].reshape(1, 64))
    with pytest.raises(InferenceServerException, match=r"input 'image' has shape \[1, 64\]") as info:
        client.infer("digits", [wrong])
    assert info.value.status() == "400"
    with pytest.raises(InferenceServerException, match=r"requested outputs \['logits'\] do not exist"):
        client.infer("digits", [tensor], outputs=[triton.InferRequestedOutput("logits")])


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_from_the_triton_client(client, images, reference, algorithm):
    tensor = triton.InferInput("image", [3, 1, 8, 8], "FP32")
    tensor.set_data_from_numpy(images[:3], binary_data=True)
    result = client.infer("digits", [tensor], request_compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("label"), reference(images[:3])[1])


@pytest.mark.parametrize(("datatype", "dtype"), [("FP64", np.float64), ("FP16", np.float16), ("INT64", np.int64)])
@pytest.mark.parametrize("binary", [True, False])
def test_a_datatype_other_than_the_models_is_refused_not_cast(client, images, datatype, dtype, binary):
    tensor = triton.InferInput("image", [1, 1, 8, 8], datatype)
    tensor.set_data_from_numpy(images[:1].astype(dtype), binary_data=binary)
    with pytest.raises(InferenceServerException, match=f"datatype {datatype} is not the model's; send FP32") as info:
        client.infer("digits", [tensor])
    assert info.value.status() == "400"


def raw(server, header: dict, binary: bytes = b"", header_length: int | None = None) -> httpx2.Response:
    head = json.dumps(header).encode()
    length = len(head) if header_length is None else header_length
    headers = {"Inference-Header-Content-Length": str(length)} if binary or header_length is not None else {}
    return httpx2.post(server.url + "/v2/models/digits/infer", content=head + binary, headers=headers)


IMAGE = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32"}


@pytest.mark.parametrize(
    ("header", "binary", "header_length", "message"),
    [
        ({"inputs": [IMAGE | {"parameters": {"binary_data_size": 256}}]}, b"\0" * 256, 10_000, "not a length within"),
        ({"inputs": [IMAGE | {"parameters": {"binary_data_size": 200}}]}, b"\0" * 200, None, "binary_data_size 200"),
        ({"inputs": [IMAGE | {"parameters": {"binary_data_size": 256}}]}, b"\0" * 100, None, "body ends 156 bytes"),
        ({"inputs": [IMAGE | {"parameters": {"binary_data_size": 256}}]}, b"\0" * 300, None, "44 bytes beyond"),
        ({"inputs": [IMAGE | {"datatype": "FP8", "data": [0] * 64}]}, b"", None, "datatype 'FP8' is not supported"),
        ({"inputs": [IMAGE | {"data": [0.0] * 63}]}, b"", None, "needs 64 values, data has 63"),
        ({"inputs": [IMAGE | {"data": ["a"] * 64}]}, b"", None, "FP32 data must be JSON numbers"),
        ({"inputs": [IMAGE | {"data": [True] * 64}]}, b"", None, "FP32 data must be JSON numbers; got booleans"),
        ({"inputs": [IMAGE | {"data": [1e300] * 64}]}, b"", None, "data has values out of range for FP32"),
        ({"inputs": [IMAGE | {"shape": [1, -1, 8, 8], "data": [0] * 64}]}, b"", None, "non-negative integers"),
        ({"inputs": [IMAGE]}, b"", None, "neither 'data' nor a binary_data_size"),
        ({"input": []}, b"", None, 'with an "inputs" list'),
    ],
)
def test_malformed_bodies_are_400_with_a_clear_message(server, header, binary, header_length, message):
    response = raw(server, header, binary, header_length)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_json_request_with_flat_and_nested_data(server, images, reference):
    flat = raw(server, {"id": "a", "inputs": [IMAGE | {"data": images[0].reshape(-1).tolist()}]}).json()
    nested = raw(server, {"inputs": [IMAGE | {"data": images[:1].tolist()}]}).json()
    assert flat["id"] == "a"
    assert "id" not in nested
    label = reference(images[:1])[1].tolist()
    assert [o["data"] for o in flat["outputs"] if o["name"] == "label"] == [label]
    assert flat["outputs"] == nested["outputs"]


def test_errors_are_json_on_every_v2_path(server):
    for path in ("/v2/models/nope", "/v2/models/nope/ready", "/v2/models/digits/versions/9"):
        response = httpx2.get(server.url + path)
        assert response.status_code == 404
        assert "error" in response.json()
    not_json = httpx2.post(server.url + "/v2/models/digits/infer", content=b"{nope")
    assert not_json.status_code == 400
    assert "not valid JSON" in not_json.json()["error"]


def test_a_large_binary_request_matches_eager(client, reference):
    # 1,000 images: a 256 KB body, over the 64 KiB the lane reads through the parser.
    x = np.random.default_rng(5).integers(0, 17, size=(1000, 1, 8, 8)).astype(np.float32)
    tensor = triton.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    result = client.infer("digits", [tensor], outputs=[triton.InferRequestedOutput("probabilities")])
    np.testing.assert_allclose(result.as_numpy("probabilities"), reference(x)[0], rtol=1e-5, atol=1e-7)


def test_a_large_body_sent_in_pauses_then_a_pipelined_request_are_both_answered(server, reference):
    x = np.random.default_rng(6).integers(0, 17, size=(1000, 1, 8, 8)).astype(np.float32)
    large = v2_request("digits", {"image": x}, ["label"], tag="odd")  # moves the data off alignment
    small = v2_request("digits", {"image": x[:3]}, ["label"])
    first, then = large.encode("127.0.0.1", 0), small.encode("127.0.0.1", 0)
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        # The head and a little of the body, then the rest in pieces, the last with the next request.
        for piece in (first[:2000], first[2000:100_000], first[100_000:] + then):
            sock.sendall(piece)
            time.sleep(0.05)
        answers = _read_answers(sock.makefile("rb"), 2)
    for (status, labels), images in zip(answers, (x, x[:3]), strict=True):
        assert status == 200
        np.testing.assert_array_equal(labels, reference(images)[1])


def _read_answers(stream: BinaryIO, count: int) -> list[tuple[int, np.ndarray]]:
    """``count`` v2 binary answers off a connection: each one's status and its label output."""
    found = []
    for _ in range(count):
        status = int(stream.readline().split()[1])
        headers = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = stream.read(int(headers["content-length"]))
        json_end = int(headers["inference-header-content-length"])
        found.append((status, np.frombuffer(body[json_end:], dtype=np.int64)))
    return found
