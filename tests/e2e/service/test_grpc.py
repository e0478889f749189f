"""The Open Inference Protocol v2 over gRPC against real servers, called with Triton's own gRPC
client (tritonclient.grpc, unmodified) and with plain grpcio where a test needs the raw wire;
every test on each gRPC front end (--grpc-server native and grpcio: the same guarantees)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Any

import grpc
import httpx2
import numpy as np
import pytest
import tritonclient.grpc as triton
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from tritonclient.utils import InferenceServerException

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import REPO_ROOT, free_port, inferpool_serve, run_server, wait_ready
from inferpool.service.grpc import inference_pb2 as pb

INFER = "/inference.GRPCInferenceService/ModelInfer"
TWO_MODELS = """
model = "inferpool.engine.zoo.digits:build"
[[models]]
source = "tests.support.slow_model:slow_calls"
name = "slow"
# eager: an exported graph would not keep the model's time.sleep; a request a call, as the deadline
# test counts its refusals (0 would batch its 20 ms calls)
runtime = { backend = "eager", max_batch_size = 1 }
"""


@pytest.fixture(scope="module", params=["native", "grpcio"])
def grpc_server(request) -> str:
    return request.param


def _serve(tmp_path_factory, grpc_server: str, *args: str, config: str | None = None):
    """A real server with gRPC on a free port: (server, "127.0.0.1:<grpc port>")."""
    logs = tmp_path_factory.mktemp("logs")
    if config is not None:
        path = logs / "config.toml"
        path.write_text(config)
        args = ("--config", str(path), *args)
    port = free_port()
    return run_server(logs, "--grpc-port", str(port), "--grpc-server", grpc_server, *args), f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def served(tmp_path_factory, grpc_server):
    running, target = _serve(tmp_path_factory, grpc_server, config=TWO_MODELS)
    with running as server:
        wait_ready(server)
        yield server, target


@pytest.fixture(scope="module")
def client(served):
    with triton.InferenceServerClient(served[1]) as connected:
        yield connected


@pytest.fixture(scope="module")
def channel(served):
    with grpc.insecure_channel(served[1]) as opened:
        yield opened


def _image_input(images: np.ndarray) -> triton.InferInput:
    tensor = triton.InferInput("image", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    return tensor


def _request(images: np.ndarray, model: str = "digits", **parameters: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="image", datatype="FP32", shape=images.shape)
    request.raw_input_contents.append(images.astype("<f4").tobytes())
    for key, value in parameters.items():
        request.parameters[key].int64_param = value
    return request


def _infer(channel: grpc.Channel, request: pb.ModelInferRequest, **kw) -> pb.ModelInferResponse:
    call = channel.unary_unary(
        INFER,
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    return call(request, **kw)


def _error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def _details(error: grpc.RpcError) -> str:
    return error.details() or ""


def test_live_ready_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("digits")
    assert client.is_model_ready("digits", "1")
    assert client.get_server_metadata().name == "inferpool"
    meta = client.get_model_metadata("digits")
    assert meta.versions == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("image", "FP32", [-1, 1, 8, 8])]
    assert {(t.name, t.datatype) for t in meta.outputs} == {("probabilities", "FP32"), ("label", "INT64")}


def test_batch_matches_eager(client, reference, images):
    result = client.infer("digits", [_image_input(images)])
    probabilities, labels = reference(images)
    np.testing.assert_allclose(result.as_numpy("probabilities"), probabilities, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(result.as_numpy("label"), labels)
    assert result.get_response().model_version == "1"


def test_requested_outputs_and_typed_contents(channel, reference, images):
    """Typed contents (fp32_contents) in, only the requested output back, raw."""
    request = pb.ModelInferRequest(model_name="digits", id="req-7")
    request.inputs.add(name="image", datatype="FP32", shape=images.shape).contents.fp32_contents.extend(
        images.reshape(-1).tolist()
    )
    request.outputs.add(name="label")
    response = _infer(channel, request)
    assert response.id == "req-7"
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [("label", "INT64", [len(images)])]
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], "<i8"), reference(images)[1])


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        (lambda r: r.inputs[0].shape.__setitem__(1, 3), grpc.StatusCode.INVALID_ARGUMENT, "takes [-1, 1, 8, 8]"),
        (lambda r: setattr(r.inputs[0], "datatype", "FP64"), grpc.StatusCode.INVALID_ARGUMENT, "send FP32"),
        (lambda r: r.raw_input_contents.append(b"x"), grpc.StatusCode.INVALID_ARGUMENT, "send one per input"),
        (lambda r: r.raw_input_contents.__setitem__(0, b"abc"), grpc.StatusCode.INVALID_ARGUMENT, "needs 512"),
        (lambda r: setattr(r, "model_name", "nope"), grpc.StatusCode.NOT_FOUND, "'nope' is not served here"),
        (lambda r: setattr(r, "model_version", "2"), grpc.StatusCode.NOT_FOUND, "no version '2'"),
        (lambda r: r.outputs.add(name="logits"), grpc.StatusCode.INVALID_ARGUMENT, "['logits'] do not exist"),
        (lambda r: r.parameters["timeout"].CopyFrom(pb.InferParameter(string_param="5")),
         grpc.StatusCode.INVALID_ARGUMENT, "integer of microseconds, 1000 (1 ms) or more"),
        (lambda r: r.parameters["timeout"].CopyFrom(pb.InferParameter(int64_param=999)),
         grpc.StatusCode.INVALID_ARGUMENT, "integer of microseconds, 1000 (1 ms) or more"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_problem(channel, change, code, words):
    request = _request(np.zeros((2, 1, 8, 8), np.float32))
    change(request)
    error = _error(lambda: _infer(channel, request))
    assert error.code() == code
    assert words in _details(error)


def test_tritonclient_sees_errors(client):
    wrong = triton.InferInput("image", [2, 3], "FP32")
    wrong.set_data_from_numpy(np.zeros((2, 3), np.float32))
    with pytest.raises(InferenceServerException, match="the model takes") as caught:
        client.infer("digits", [wrong])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("nope")
    assert caught.value.status() == "StatusCode.NOT_FOUND"


def test_deadlines(served, client, channel):
    """The v2 "timeout" parameter and the gRPC deadline both bound a call (the slow model
    sleeps 20 ms per call). A parameter under the model's deadline floor (its fastest call at
    start-up) is request data that can never be met: INVALID_ARGUMENT, as REST's 400. The
    channel's own deadline is not held to the floor: a Triton client expects DEADLINE_EXCEEDED."""
    images = np.zeros((1, 1, 8, 8), np.float32)
    with pytest.raises(InferenceServerException, match="fastest measured call") as caught:
        client.infer("slow", [_image_input(images)], timeout=1000)  # µs
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    # 15 ms cannot hold a 20 ms call: the server reads the deadline from gRPC and refuses the
    # call at once (its admission predicts the miss) or stops waiting at the deadline. The
    # caller's own deadline can win the race to report it, so the server's count says so.
    refused_before = _deadline_refusals(served[0].url)
    error = _error(lambda: _infer(channel, _request(images, "slow"), timeout=0.015))
    assert error.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}, error
    assert "deadline" in _details(error).lower()
    waited = time.monotonic() + 5
    while _deadline_refusals(served[0].url) == refused_before and time.monotonic() < waited:
        time.sleep(0.05)
    assert _deadline_refusals(served[0].url) == refused_before + 1
    assert _infer(channel, _request(images, "slow"), timeout=5).outputs  # and it still serves


def _deadline_refusals(url: str) -> float:
    text = httpx2.get(url + "/metrics").text
    return sum(metric_total(text, "inferpool_rejections_total", reason=r) for r in ("predicted_wait", "deadline"))


def test_health_service(channel):
    health: Any = health_pb2_grpc.HealthStub(channel)  # its stubs type the methods per channel kind
    for service in ("", "inference.GRPCInferenceService"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    error = _error(lambda: health.Check(health_pb2.HealthCheckRequest(service="other"), timeout=5))
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_request_id_and_metrics_by_rpc(served, channel):
    server, _ = served
    call = channel.unary_unary(
        INFER,
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    _, outcome = call.with_call(_request(np.zeros((1, 1, 8, 8), np.float32)), metadata=(("x-request-id", "trace-42"),))
    assert ("x-request-id", "trace-42") in tuple(outcome.trailing_metadata())
    _error(lambda: _infer(channel, _request(np.zeros((1, 1, 8, 8), np.float32), "nope")))
    text = httpx2.get(server.url + "/metrics").text
    assert metric_total(text, "inferpool_grpc_requests_total", rpc="ModelInfer", code="OK") >= 1
    assert metric_total(text, "inferpool_grpc_requests_total", rpc="ModelInfer", code="NOT_FOUND") >= 1
    assert metric_total(text, "inferpool_inference_seconds_count", model="digits") >= 1


def test_a_second_server_on_the_grpc_port_stops_at_once(served):
    port = served[1].rsplit(":", 1)[1]
    done = subprocess.run(
        [*inferpool_serve("--grpc-port", port)(free_port())], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
    )
    assert done.returncode == 2
    assert f"cannot listen for gRPC on 127.0.0.1:{port}" in done.stderr + done.stdout


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, grpc_server):
    """The slow model alone, one request inside each process at most, a 4 KiB message limit and
    an API key."""
    running, target = _serve(
        tmp_path_factory,
        grpc_server,
        "--model", "tests.support.slow_model:slow_calls", "--runtime.backend", "eager", "--runtime.max-batch-size", "1",
        "--max-queue", "0", "--max-body-bytes", "4096", "--api-key", "sesame",
    )  # fmt: skip
    with running as server:
        wait_ready(server)
        with grpc.insecure_channel(target) as opened:
            yield opened


KEY = (("authorization", "Bearer sesame"),)


def test_api_key_from_metadata(guarded):
    images = np.zeros((1, 1, 8, 8), np.float32)
    error = _error(lambda: _infer(guarded, _request(images), timeout=5))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    wrong = _error(lambda: _infer(guarded, _request(images), metadata=(("x-api-key", "nope"),), timeout=5))
    assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _infer(guarded, _request(images), metadata=KEY, timeout=5).outputs
    assert _infer(guarded, _request(images), metadata=(("x-api-key", "sesame"),), timeout=5).outputs
    live = guarded.unary_unary(
        "/inference.GRPCInferenceService/ServerLive",
        request_serializer=pb.ServerLiveRequest.SerializeToString,
        response_deserializer=pb.ServerLiveResponse.FromString,
    )
    assert live(pb.ServerLiveRequest(), timeout=5).live  # exempt, as /v2/health/live is


def test_message_over_the_limit_is_resource_exhausted(guarded):
    error = _error(lambda: _infer(guarded, _request(np.zeros((32, 1, 8, 8), np.float32)), metadata=KEY, timeout=5))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_overload_is_unavailable_with_retry_info(guarded):
    """16 calls at once against room for one per process: the rest are refused at once,
    UNAVAILABLE with RetryInfo, and every accepted one is answered."""
    request = _request(np.zeros((1, 1, 8, 8), np.float32))
    call = guarded.unary_unary(
        INFER,
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    futures = [call.future(request, metadata=KEY, timeout=10) for _ in range(16)]
    refused = [f.exception() for f in futures if f.exception() is not None]
    answered = [f.result() for f in futures if f.exception() is None]
    assert answered
    assert refused
    for error in refused:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error
        status = rpc_status.from_call(error)
        assert status is not None
        retry = error_details_pb2.RetryInfo()
        assert any(detail.Unpack(retry) for detail in status.details)
        assert retry.retry_delay.seconds >= 1


def test_sigterm_drains_grpc_calls(tmp_path_factory, grpc_server):
    """Callers looping on the slow model while the server drains: every call is answered or
    refused UNAVAILABLE, none that was accepted is cut, and the server exits 0.

    A call that reaches a process in the instant its gRPC server closes is CANCELLED by grpcio
    before InferPool sees it (never run; ~1 in 500 refused calls here): allowed only for calls
    sent after the SIGTERM."""
    running, target = _serve(
        tmp_path_factory,
        grpc_server,
        "--model",
        "tests.support.slow_model:slow_calls",
        "--runtime.backend",
        "eager",
        "--runtime.max-batch-size",
        "1",
        "--drain-seconds",
        "5",
    )
    outcomes: list[tuple[float, grpc.StatusCode]] = []  # (sent at, outcome)
    stop = threading.Event()
    with running as server:
        wait_ready(server)

        def caller() -> None:
            with grpc.insecure_channel(target) as opened:
                while not stop.is_set():
                    sent = time.monotonic()
                    try:
                        _infer(opened, _request(np.zeros((1, 1, 8, 8), np.float32)), timeout=10)
                        outcomes.append((sent, grpc.StatusCode.OK))
                    except grpc.RpcError as error:
                        outcomes.append((sent, error.code()))
                        time.sleep(0.01)

        callers = [threading.Thread(target=caller) for _ in range(6)]
        for thread in callers:
            thread.start()
        time.sleep(1.0)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=30)
        time.sleep(0.3)
        stop.set()
        for thread in callers:
            thread.join(timeout=15)
        output = server.output()
    assert code == 0, output
    assert sum(1 for sent, outcome in outcomes if outcome == grpc.StatusCode.OK and sent < signalled) > 10
    kinds = {outcome for _, outcome in outcomes}
    assert kinds <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}, kinds
    assert all(sent > signalled for sent, outcome in outcomes if outcome == grpc.StatusCode.CANCELLED)
    processes = output.count("SIGTERM received: draining for up to")
    assert processes >= 1
    assert output.count("drained: every accepted request was answered") == processes, output
