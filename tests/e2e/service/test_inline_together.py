"""The real server with no flags, many keep-alive connections sending at once: requests that reach a
serving process in one loop wake-up run as one engine call (service/inline_together.py), and each
client still gets its own answer -- eager PyTorch's numbers, its own request id, a bad request its
own 400 -- while the metrics show requests that rode in calls of several samples."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx2
import numpy as np
import orjson
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import run_server, wait_ready

CONNECTIONS = 48
T = TypeVar("T")
BAD = b'{"inputs": [[1, 2]]}'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("logs")) as running:
        wait_ready(running)
        yield running


def request(path: str, body: bytes, rid: str) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\nx-request-id: {rid}\r\n"
    return (head + f"content-length: {len(body)}\r\n\r\n").encode() + body


def read_answer(sock: socket.socket, pending: bytearray) -> tuple[int, dict[bytes, bytes], bytes]:
    while b"\r\n\r\n" not in pending:
        pending += sock.recv(65536)
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
    length = int(headers[b"content-length"])
    while len(rest) < length:
        rest += sock.recv(65536)
    pending[:] = rest[length:]
    return int(lines[0].split()[1]), headers, rest[:length]


def at_once(
    port: int, connections: int, rounds: int, sent_by: Callable[[int, int], tuple[str, bytes, T]]
) -> Iterator[tuple[str, bytes, T, int, bytes]]:
    """Each round, every connection sends what ``sent_by(connection, round)`` says (path, body, and
    a tag for the caller) at once, then each answer is read in turn, its request id checked:
    (path, body, tag, status, answer body)."""
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    buffers = [bytearray() for _ in sockets]
    try:
        for round_ in range(rounds):
            sent = []
            for at, sock in enumerate(sockets):
                path, body, tag = sent_by(at, round_)
                rid = f"r{round_}-{at}"
                sock.sendall(request(path, body, rid))
                sent.append((path, body, tag, rid))
            for sock, pending, (path, body, tag, rid) in zip(sockets, buffers, sent, strict=True):
                status, headers, answer = read_answer(sock, pending)
                assert headers[b"x-request-id"] == rid.encode()
                yield path, body, tag, status, answer
    finally:
        for sock in sockets:
            sock.close()


def test_many_connections_at_once_each_get_their_own_answer_from_shared_calls(server, images, reference):
    probabilities, label = reference(images)

    def sent_by(at: int, round_: int) -> tuple[str, bytes, int]:
        image = (at + round_) % len(images)
        if at % 11 == 5:
            return "/predict", BAD, image
        if at % 3 == 0:
            tensor = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32"}
            body = orjson.dumps({"inputs": [tensor | {"data": images[image].reshape(-1).tolist()}]})
            return "/v2/models/digits/infer", body, image
        return "/predict", orjson.dumps({"inputs": images[image].tolist()}), image

    for path, body, image, status, answer in at_once(server.port, CONNECTIONS, 12, sent_by):
        if body == BAD:
            assert status == 400
            assert "input 'image' has shape [1, 2]" in orjson.loads(answer)["error"]
            continue
        assert status == 200, answer
        found = orjson.loads(answer)
        if path == "/predict":
            got_p, got_l = found["outputs"]["probabilities"], found["outputs"]["label"]
        else:
            outputs = {o["name"]: o["data"] for o in found["outputs"]}
            got_p, got_l = outputs["probabilities"], outputs["label"][0]
        np.testing.assert_allclose(np.ravel(got_p), probabilities[image], rtol=1e-3, atol=1e-5)
        assert got_l == int(label[image])
    text = httpx2.get(f"{server.url}/metrics").text
    calls, samples = metric_total(text, "inferpool_batch_size_count"), metric_total(text, "inferpool_batch_size_sum")
    assert calls > 0
    assert samples / calls > 1.5  # requests rode in calls of several samples: theirs and their neighbours'
