"""The access log and the payload log of a real server: lines that parse and match the requests
sent (HTTP and gRPC), sampling within bounds, redaction, CloudEvents, and a stalled sink that
drops (and counts) rather than slows anyone down."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import numpy as np
import orjson
import tritonclient.grpc as triton

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import free_port, inferpool_serve, launch

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PHASE_FIELDS = ("decode_ms", "queue_ms", "batch_ms", "inference_ms", "encode_ms")
N_SAMPLED = 200  # at sample 0.5: 100 expected, sd ~7; the bounds below are > 5 sd away


def _access_lines(output: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "inferpool.access"]


def _v2_body(images: np.ndarray) -> dict[str, Any]:
    tensor = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": images[1].ravel().tolist()}
    return {"inputs": [tensor]}


def _grpc_infer(target: str, images: np.ndarray, request_id: str) -> None:
    with triton.InferenceServerClient(target) as client:
        tensor = triton.InferInput("image", [1, 1, 8, 8], "FP32")
        tensor.set_data_from_numpy(images[:1])
        client.infer(
            "digits", [tensor], request_id=request_id, headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
        )


def test_access_log_lines_match_the_requests(tmp_path, images):
    grpc_port = free_port()
    args = ("--access-log", "--log-format", "json", "--log-level", "warning", "--grpc-port", str(grpc_port))
    sent: dict[str, tuple[int, httpx2.Response]] = {}
    with launch(inferpool_serve(*args), tmp_path) as server:
        with httpx2.Client(base_url=server.url) as http:
            for n in range(4):
                content = orjson.dumps({"inputs": images[n].tolist()})
                headers = {"x-request-id": f"access-{n}", "content-type": "application/json"}
                if n == 0:
                    headers["traceparent"] = f"00-{TRACE}-00f067aa0ba902b7-01"
                sent[f"access-{n}"] = (len(content), http.post("/predict", content=content, headers=headers))
            bad = b'{"inputs": "oops"}'
            sent["access-bad"] = (len(bad), http.post("/predict", content=bad, headers={"x-request-id": "access-bad"}))
            v2 = orjson.dumps(_v2_body(images))
            sent["access-v2"] = (
                len(v2),
                http.post("/v2/models/digits/infer", content=v2, headers={"x-request-id": "access-v2"}),
            )
        _grpc_infer(f"127.0.0.1:{grpc_port}", images, "access-grpc")
        time.sleep(0.5)  # the last line is written after its answer
        lines = {line["request_id"]: line for line in _access_lines(server.output())}
    for rid, (size, answer) in sent.items():
        line = lines[rid]
        assert line["message"] == "access"
        assert line["status"] == answer.status_code
        assert line["method"] == "POST"
        assert line["bytes_in"] == size
        assert line["bytes_out"] == len(answer.content)
        assert line["model"] == "digits"
        assert line["duration_ms"] > 0
    for rid in ("access-0", "access-1", "access-2", "access-3", "access-v2"):
        line = lines[rid]
        assert line["status"] == 200
        assert line["batch_size"] == 1
        assert all(line[name] >= 0 for name in PHASE_FIELDS)
        assert line["inference_ms"] > 0
        assert line["duration_ms"] >= line["inference_ms"]
    assert lines["access-0"]["route"] == "/predict"
    assert lines["access-0"]["trace_id"] == TRACE  # the caller's trace, tracing being off
    assert "trace_id" not in lines["access-1"]
    assert lines["access-bad"]["status"] == 400
    assert lines["access-v2"]["route"] == "/v2/models/{name}/infer"
    grpc_line = lines["access-grpc"]
    assert (grpc_line["rpc"], grpc_line["status"], grpc_line["trace_id"]) == ("ModelInfer", "OK", TRACE)
    assert grpc_line["bytes_in"] > 256  # 64 floats
    assert grpc_line["bytes_out"] > 40  # 10 + 1 numbers
    assert grpc_line["inference_ms"] > 0


def test_access_log_sampled(tmp_path):
    args = ("--access-log", "--access-log-sample", "0.5", "--log-format", "json")
    with launch(inferpool_serve(*args), tmp_path) as server:
        with httpx2.Client(base_url=server.url) as http:
            for n in range(N_SAMPLED):
                assert http.get("/health/live", headers={"x-request-id": f"sampled-{n}"}).status_code == 200
        time.sleep(0.5)
        logged = [line for line in _access_lines(server.output()) if line["request_id"].startswith("sampled-")]
    assert 60 <= len(logged) <= 140, len(logged)
    assert {line["route"] for line in logged} == {"/health/live"}


def test_payload_log_sampled_and_redacted(tmp_path, images):
    sink = tmp_path / "payloads.jsonl"
    grpc_port = free_port()
    args = (
        "--payload-log", str(sink), "--payload-log-sample", "0.5", "--payload-log-redact", '["image", "label"]',
        "--grpc-port", str(grpc_port),
    )  # fmt: skip
    answers: dict[str, Any] = {}
    with launch(inferpool_serve(*args), tmp_path) as server:
        with httpx2.Client(base_url=server.url) as http:
            for n in range(N_SAMPLED):
                answer = http.post(
                    "/predict", json={"inputs": images[n % 16].tolist()}, headers={"x-request-id": f"p-{n}"}
                )
                assert answer.status_code == 200
                answers[f"p-{n}"] = (images[n % 16].tolist(), answer.json())
            for n in range(20):  # named inputs: redacted (half of them logged)
                assert http.post("/v2/models/digits/infer", json=_v2_body(images), headers={"x-request-id": f"v-{n}"})
        for n in range(20):
            _grpc_infer(f"127.0.0.1:{grpc_port}", images, f"g-{n}")
        server.stop(30)  # the queue is written out before the process exits
    records = [json.loads(line) for line in sink.read_text().splitlines()]
    plain = [r for r in records if r["request_id"].startswith("p-")]
    assert 60 <= len(plain) <= 140, len(plain)
    for record in plain:
        inputs, answer = answers[record["request_id"]]
        assert record["request"] == {"inputs": inputs}
        assert record["response"]["outputs"]["probabilities"] == answer["outputs"]["probabilities"]
        assert record["response"]["outputs"]["label"] == "[redacted]"
        assert (record["route"], record["status"], record["model"], record["protocol"]) == (
            "/predict",
            200,
            "digits",
            "http",
        )
    v2 = [r for r in records if r["request_id"].startswith("v-")]
    assert 1 <= len(v2) <= 19
    for record in v2:
        assert record["request"]["inputs"][0]["data"] == "[redacted]"
        assert record["request"]["inputs"][0]["shape"] == [1, 1, 8, 8]
        outputs = {o["name"]: o for o in record["response"]["outputs"]}
        assert outputs["label"]["data"] == "[redacted]"
        assert len(outputs["probabilities"]["data"]) == 10
    grpc_records = [r for r in records if r["protocol"] == "grpc"]
    assert 1 <= len(grpc_records) <= 19
    for record in grpc_records:
        assert (record["route"], record["status"]) == ("ModelInfer", "OK")
        assert record["request"]["modelName"] == "digits"
        assert record["request"]["rawInputContents"] == [{"binary_bytes": 256}]  # binary data: its size only
        assert record["trace_id"] == TRACE


class _Sink(BaseHTTPRequestHandler):
    """A CloudEvents receiver; ``stall`` makes it take requests and never answer."""

    events: list[tuple[dict[str, str], Any]]
    stall: threading.Event

    def do_POST(self) -> None:
        if self.stall.is_set():  # holds the connection: the server's writer waits on it
            time.sleep(30)
            return
        body = self.rfile.read(int(self.headers["content-length"]))
        self.events.append(({k.lower(): v for k, v in self.headers.items()}, json.loads(body)))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _sink_server(stall: bool) -> Iterator[tuple[str, type[_Sink]]]:
    """The sink's URL and handler class (its ``events``), stopped on the way out."""

    class Sink(_Sink):  # a class per sink: its own events
        events: list[tuple[dict[str, str], Any]] = []  # noqa: RUF012 -- filled by the handler instances
        stall = threading.Event()

    handler = Sink
    if stall:
        handler.stall.set()
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/events", handler
    finally:
        server.shutdown()
        server.server_close()


def test_payload_log_sends_cloudevents(tmp_path, images):
    with _sink_server(stall=False) as (url, handler), launch(inferpool_serve("--payload-log", url), tmp_path) as server:
        body, headers = {"inputs": images[0].tolist()}, {"x-request-id": "ce-1"}
        answer = httpx2.post(server.url + "/predict", json=body, headers=headers)
        assert answer.status_code == 200
        server.stop(30)
    assert [headers["ce-type"] for headers, _ in handler.events] == [
        "org.inferpool.inference.request", "org.inferpool.inference.response",
    ]  # fmt: skip
    for headers, _ in handler.events:
        assert (headers["ce-id"], headers["ce-specversion"]) == ("ce-1", "1.0")
        assert headers["content-type"] == "application/json"
        assert headers["ce-source"].startswith("inferpool/")
    assert handler.events[0][1] == body
    assert handler.events[1][1] == answer.json()


def test_a_stalled_sink_drops_and_counts_instead_of_blocking(tmp_path, images):
    with _sink_server(stall=True) as (url, _):
        with launch(inferpool_serve("--payload-log", url, "--payload-log-queue", "2"), tmp_path) as server:
            with httpx2.Client(base_url=server.url) as http:
                for n in range(30):
                    assert http.post("/predict", json={"inputs": images[n % 16].tolist()}).status_code == 200
                text = http.get("/metrics").text
            server.stop(30)
        assert server.process.returncode == 0
    dropped = metric_total(text, "inferpool_payload_log_records_total", outcome="dropped")
    # One record is with the writer (stalled on the sink), two wait in the queue: the rest dropped.
    assert dropped >= 30 - 3, text
