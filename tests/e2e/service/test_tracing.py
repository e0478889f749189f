"""OpenTelemetry traces from a real server, received by a real OTLP collector (tests/support):
the caller's traceparent continued over HTTP and gRPC, the phase children placed inside the
server span, parent-based sampling, batched requests linked to their batch's span, and a
collector that is down."""

from __future__ import annotations

import itertools
import threading
import time

import httpx2
import numpy as np
import tritonclient.grpc as triton
from opentelemetry.proto.trace.v1 import trace_pb2

from inferpool.harness.server import free_port, inferpool_serve, launch
from tests.support.otlp_collector import attributes, grpc_collector, http_collector

PARENT_SPAN = "00f067aa0ba902b7"
PHASES = {"decode", "queue", "inference", "encode"}
SERVER = trace_pb2.Span.SPAN_KIND_SERVER


def traceparent(trace_id: str, sampled: bool = True) -> str:
    return f"00-{trace_id}-{PARENT_SPAN}-{'01' if sampled else '00'}"


def trace_id(n: int) -> str:
    return f"{n:032x}"


def _serve(tmp_path, collector_port: int, *args: str, protocol: str = "http/protobuf"):
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: the test waits for the export, not the default 5 s
        "OTEL_SERVICE_NAME": "digits-under-test",
    }
    return launch(inferpool_serve("--tracing", *args), tmp_path, env=env)


def _of_trace(spans, trace: str):
    return [s for s in spans if s.trace_id.hex() == trace]


def _server_span(spans, trace: str):
    found = [s for s in _of_trace(spans, trace) if s.kind == SERVER]
    assert len(found) == 1, [s.name for s in _of_trace(spans, trace)]
    return found[0]


def _continued(spans, trace: str, name: str):
    """The server span of ``trace``: named ``name``, child of the caller's span, serving digits."""
    span = _server_span(spans, trace)
    assert span.name == name
    assert span.parent_span_id.hex() == PARENT_SPAN
    found = attributes(span.attributes)
    assert found["inferpool.model"] == "digits"
    return span, found


def _check_phases(spans, server) -> dict[str, trace_pb2.Span]:
    """The children: each phase once, inside the server span, in order; returned by name."""
    children = {s.name: s for s in spans if s.parent_span_id == server.span_id}
    assert set(children) >= PHASES, sorted(children)
    slack = 1_000  # ns: the clocks are read at slightly different instants
    for child in children.values():
        assert child.trace_id == server.trace_id
        assert server.start_time_unix_nano - slack <= child.start_time_unix_nano
        assert child.start_time_unix_nano <= child.end_time_unix_nano <= server.end_time_unix_nano + slack
    order = [children[name] for name in ("decode", "queue", "inference", "encode")]
    for before, after in itertools.pairwise(order):
        assert before.end_time_unix_nano <= after.start_time_unix_nano + slack, (before.name, after.name)
    assert children["inference"].end_time_unix_nano > children["inference"].start_time_unix_nano
    return children


def _server_timing(header: str) -> dict[str, float]:
    return {part.split(";")[0].strip(): float(part.split("dur=")[1]) for part in header.split(",")}


def test_http_request_continues_the_callers_trace(tmp_path, images):
    port = free_port()
    with http_collector(port) as collected, _serve(tmp_path, port) as server:
        trace = trace_id(0xA1)
        headers = {"traceparent": traceparent(trace), "x-request-id": "traced-1"}
        answer = httpx2.post(server.url + "/predict", json={"inputs": images[0].tolist()}, headers=headers)
        assert answer.status_code == 200, answer.text
        v2_trace = trace_id(0xA2)
        tensor = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": images[1].ravel().tolist()}
        v2_headers = {"traceparent": traceparent(v2_trace)}
        infer = httpx2.post(server.url + "/v2/models/digits/infer", json={"inputs": [tensor]}, headers=v2_headers)
        assert infer.status_code == 200, infer.text
        spans = collected.wait_for(lambda got: len(_of_trace(got, trace)) >= 5 and len(_of_trace(got, v2_trace)) >= 5)
        assert collected.resources[0]["service.name"] == "digits-under-test"
    span, found = _continued(spans, trace, "inferpool.predict")
    assert found["http.route"] == "/predict"
    assert found["http.response.status_code"] == 200
    assert found["inferpool.request_id"] == "traced-1"
    assert found["inferpool.batch_size"] == 1
    children = _check_phases(spans, span)
    # The spans are the same measurements Server-Timing reports (ms, 3 decimals there).
    timing = _server_timing(answer.headers["server-timing"])
    inference = children["inference"]
    assert abs((inference.end_time_unix_nano - inference.start_time_unix_nano) / 1e6 - timing["inference"]) < 0.002
    encode = children["encode"]
    assert abs((encode.end_time_unix_nano - encode.start_time_unix_nano) / 1e6 - timing["encode"]) < 0.002
    v2_span = _server_span(spans, v2_trace)
    assert attributes(v2_span.attributes)["http.route"] == "/v2/models/{name}/infer"
    _check_phases(spans, v2_span)


def test_grpc_metadata_traceparent_exported_over_otlp_grpc(tmp_path, images):
    port, grpc_port = free_port(), free_port()
    with grpc_collector(port) as collected, _serve(tmp_path, port, "--grpc-port", str(grpc_port), protocol="grpc"):
        trace = trace_id(0xB1)
        with triton.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            tensor = triton.InferInput("image", [1, 1, 8, 8], "FP32")
            tensor.set_data_from_numpy(images[:1])
            result = client.infer("digits", [tensor], headers={"traceparent": traceparent(trace)})
            assert result.as_numpy("probabilities").shape == (1, 10)
        spans = collected.wait_for(lambda got: len(_of_trace(got, trace)) >= 5)
    span, found = _continued(spans, trace, "ModelInfer")
    assert found["rpc.method"] == "ModelInfer"
    assert found["rpc.grpc.status_code"] == "OK"
    _check_phases(spans, span)


def test_parent_based_sampling_at_ratio_zero(tmp_path, images):
    port = free_port()
    body = {"inputs": images[0].tolist()}
    with http_collector(port) as collected, _serve(tmp_path, port, "--trace-sample", "0") as server:
        with httpx2.Client(base_url=server.url) as http:
            assert http.post("/predict", json=body).status_code == 200  # no parent: the ratio, 0
            unsampled = http.post("/predict", json=body, headers={"traceparent": traceparent(trace_id(0xC1), False)})
            assert unsampled.status_code == 200  # the caller chose not to sample
            sampled = http.post("/predict", json=body, headers={"traceparent": traceparent(trace_id(0xC2))})
            assert sampled.status_code == 200  # the caller's sampled trace is followed
        spans = collected.wait_for(lambda got: len(_of_trace(got, trace_id(0xC2))) >= 5)
        server.stop(30)  # flushes whatever else the server still held
    assert server.process.returncode == 0
    assert {s.trace_id.hex() for s in collected.spans} == {trace_id(0xC2)}
    assert len(spans) == len(collected.spans)


def test_batched_requests_link_to_their_batch(tmp_path, images):
    port = free_port()
    args = ("--runtime.max-batch-size", "16", "--runtime.max-queue-delay-us", "50000", "--runtime.dispatch", "threads")
    with http_collector(port) as collected, _serve(tmp_path, port, *args) as server:
        traces = [trace_id(0xD00 + n) for n in range(8)]
        answers: list[httpx2.Response] = []

        def send(n: int) -> None:
            headers = {"traceparent": traceparent(traces[n])}
            answers.append(httpx2.post(server.url + "/predict", json={"inputs": images[n].tolist()}, headers=headers))

        threads = [threading.Thread(target=send, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [a.status_code for a in answers] == [200] * 8
        spans = collected.wait_for(lambda got: all(len(_of_trace(got, t)) >= 5 for t in traces))
        batched = [t for t in traces if attributes(_server_span(spans, t).attributes)["inferpool.batch_size"] > 1]
        assert batched, "with a 50 ms batch window, 8 concurrent requests should share a call"
        spans = collected.wait_for(lambda got: any(s.name == "inferpool.batch" for s in got))
    batches = {s.span_id: s for s in spans if s.name == "inferpool.batch"}
    for trace in batched:
        server_span = _server_span(spans, trace)
        inference = _check_phases(spans, server_span)["inference"]
        assert len(inference.links) == 1
        batch = batches[inference.links[0].span_id]
        assert (
            attributes(batch.attributes)["inferpool.batch_size"]
            == attributes(server_span.attributes)["inferpool.batch_size"]
        )
        assert batch.start_time_unix_nano == inference.start_time_unix_nano
    # Each request keeps its own server span in its own trace.
    assert len({_server_span(spans, t).span_id for t in batched}) == len(batched)


def test_a_collector_that_is_down_costs_clients_nothing(tmp_path, images):
    nobody = free_port()  # nothing listens there
    with _serve(tmp_path, nobody) as server:
        with httpx2.Client(base_url=server.url) as http:
            for n in range(20):
                headers = {"traceparent": traceparent(trace_id(0xE00 + n))}
                answer = http.post("/predict", json={"inputs": images[n % 16].tolist()}, headers=headers)
                assert answer.status_code == 200, answer.text
                assert np.asarray(answer.json()["outputs"]["probabilities"]).shape == (10,)
        stopping = time.monotonic()
        server.stop(30)
        stopped = time.monotonic() - stopping
    assert server.process.returncode == 0, server.output()[-3000:]
    # The SDK alone would wait up to 30 s for the exporter at exit; the server gives it 2 s.
    assert stopped < 15, stopped


def test_every_serving_process_exports(tmp_path, images):
    port = free_port()
    with http_collector(port) as collected, _serve(tmp_path, port, "--workers", "2") as server:
        pids: set[str] = set()
        n = 0
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:  # fresh connections: either process may accept
            headers = {"traceparent": traceparent(trace_id(0xF00 + n))}
            answer = httpx2.post(server.url + "/predict", json={"inputs": images[n % 16].tolist()}, headers=headers)
            n += 1
            if answer.status_code == 200:
                pids.add(answer.headers["x-request-id"].split("-")[0])
        assert len(pids) == 2, "both processes should have answered"
        collected.wait_for(lambda _: len({r["process.pid"] for r in collected.resources}) == 2)
    assert {format(r["process.pid"], "x") for r in collected.resources} == pids
