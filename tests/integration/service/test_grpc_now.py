"""ModelInfer answered in the native gRPC front end's batch (``Servicer.infer_now``), without a
task or the wrapper's coroutines, for a model that runs inline. A real native server (pygrpc-native)
on a free port serves the in-process app's door; a grpc.aio client sends raw requests. The
same calls answered the wrapped way (the model made to look not inline) must come back with the
same codes, words, trailing metadata and bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
from fastapi.testclient import TestClient
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from inferpool.harness.server import free_port
from inferpool.service.auth import ApiKey
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.grpc.native import NativeFrontEnd
from inferpool.service.grpc.servicer import Servicer
from tests.integration.service.conftest import metric_total

INFER = "/inference.GRPCInferenceService/ModelInfer"
KEY = "grpc-now-key"
Outcome = tuple[str, str, tuple[tuple[str, str | bytes], ...], bytes]
"""(code, details, trailing metadata but the request id when generated, response or status bytes)"""


def _request(images: np.ndarray, **fields: Any) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(**{"model_name": "digits", **fields})
    request.inputs.add(name="image", datatype="FP32", shape=images.shape)
    request.raw_input_contents.append(images.astype("<f4").tobytes())
    return request


def _bad_shape(images: np.ndarray) -> pb.ModelInferRequest:
    request = _request(images)
    request.inputs[0].shape[1] = 3
    return request


def _unknown_output(images: np.ndarray) -> pb.ModelInferRequest:
    request = _request(images)
    request.outputs.add(name="logits")
    return request


def _short_timeout(images: np.ndarray) -> pb.ModelInferRequest:
    request = _request(images)
    request.parameters["timeout"].CopyFrom(pb.InferParameter(int64_param=999))
    return request


# Each call: its request, and the metadata it is sent with.
CALLS: dict[str, Callable[[np.ndarray], tuple[bytes, tuple[tuple[str, str], ...]]]] = {
    "plain": lambda images: (_request(images).SerializeToString(), ()),
    "its own id": lambda images: (_request(images, id="req-9").SerializeToString(), ()),
    "an id in metadata": lambda images: (_request(images).SerializeToString(), (("x-request-id", "trace-7"),)),
    "requested output": lambda images: (_request(images, outputs=[{"name": "label"}]).SerializeToString(), ()),
    "bad shape": lambda images: (_bad_shape(images).SerializeToString(), ()),
    "unknown output": lambda images: (_unknown_output(images).SerializeToString(), ()),
    "timeout under 1 ms": lambda images: (_short_timeout(images).SerializeToString(), ()),
    "unknown model": lambda images: (_request(images, model_name="nope").SerializeToString(), ()),
    "undecodable": lambda images: (b"\xff\xff\xff", ()),
}


@pytest.fixture(scope="module")
def app_state(client: TestClient) -> Any:
    return client.app.state  # type: ignore[attr-defined]


@pytest.fixture
def wrapped_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wrapped ModelInfer raising proves an answer came from the batch.
    async def refuse(self: Servicer, request: object, context: object) -> None:
        raise AssertionError("the call went the wrapped way")

    monkeypatch.setattr(Servicer, "model_infer", refuse)


@pytest.fixture
def not_inline(app_state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _look_not_inline(app_state, monkeypatch)


def _look_not_inline(state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its inline executor still answers the wrapped way's awaited infer.
    monkeypatch.setattr(state.host.serving(), "inline", False)


def exchange(
    state: Any, calls: list[tuple[bytes, tuple[tuple[str, str], ...]]], auth: ApiKey | None = None
) -> list[Outcome]:
    """Start a native front end on the app's door, make each call in turn, stop it."""

    async def run() -> list[Outcome]:
        servicer = Servicer(state.door, version="test", auth=auth)
        target = f"127.0.0.1:{free_port()}"
        front = NativeFrontEnd(servicer, state.host, target, 1 << 22)
        await front.start()
        outcomes: list[Outcome] = []
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                rpc: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(INFER)
                for body, metadata in calls:
                    call = rpc(body, metadata=metadata, timeout=10)
                    try:
                        answer = await call
                        code, details = "OK", ""
                    except grpc.aio.AioRpcError as error:
                        status = rpc_status.from_call(error)  # type: ignore[arg-type]
                        answer = b"" if status is None else status.SerializeToString()
                        code, details = error.code().name, error.details() or ""
                    trailing = tuple((key, value) for key, value in (await call.trailing_metadata() or ()))
                    outcomes.append((code, details, _steady(trailing), answer))
        finally:
            await front.stop(1.0)
        return outcomes

    return asyncio.run(run())


def _steady(trailing: tuple[tuple[str, str | bytes], ...]) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata, a generated request id (pid-time-serial) blanked: it differs per call."""
    return tuple(
        (key, "-" if key == "x-request-id" and str(value).count("-") >= 2 else value)
        for key, value in trailing
        if key != "grpc-status-details-bin"  # compared as the status bytes
    )


def _calls(images: np.ndarray) -> list[tuple[bytes, tuple[tuple[str, str], ...]]]:
    return [make(images) for make in CALLS.values()]


def test_model_infer_is_answered_in_the_batch(app_state, wrapped_refused, reference, images):
    ((code, details, trailing, answer),) = exchange(app_state, [CALLS["an id in metadata"](images)])
    assert (code, details) == ("OK", "")
    assert ("x-request-id", "trace-7") in trailing
    response = pb.ModelInferResponse.FromString(answer)
    assert (response.model_name, response.model_version) == ("digits", "1")
    probabilities, labels = reference(images)
    outputs = dict(zip([o.name for o in response.outputs], response.raw_output_contents, strict=True))
    np.testing.assert_allclose(
        np.frombuffer(outputs["probabilities"], "<f4").reshape(probabilities.shape), probabilities, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_array_equal(np.frombuffer(outputs["label"], "<i8"), labels)


def test_the_batch_and_the_wrapped_way_answer_alike(app_state, images, monkeypatch):
    wrapped_calls: list[str] = []
    model_infer = Servicer.model_infer

    async def counted(self: Servicer, request: Any, context: Any) -> Any:
        wrapped_calls.append(request.model_name)
        return await model_infer(self, request, context)

    monkeypatch.setattr(Servicer, "model_infer", counted)
    now = exchange(app_state, _calls(images))
    assert wrapped_calls == ["nope"]  # only the unknown model went the wrapped way (the key comes first there)
    monkeypatch.setattr(Servicer, "model_infer", model_infer)
    _look_not_inline(app_state, monkeypatch)
    wrapped = exchange(app_state, _calls(images))
    for name, (mine, theirs) in zip(CALLS, zip(now, wrapped, strict=True), strict=True):
        assert mine == theirs, name
    codes = [code for code, *_ in now]
    assert codes == ["OK"] * 4 + ["INVALID_ARGUMENT"] * 3 + ["NOT_FOUND", "INTERNAL"]
    assert app_state.activity.active == 0  # every call counted out of the door


def test_a_model_not_inline_takes_the_wrapped_way(app_state, not_inline, wrapped_refused, images):
    ((code, details, _, _),) = exchange(app_state, [CALLS["plain"](images)])
    assert (code, details) == ("INTERNAL", "internal server error; the server log has the details")


def test_the_key_is_checked_in_the_batch(app_state, wrapped_refused, images):
    body, _ = CALLS["plain"](images)
    auth = ApiKey(KEY, ())
    wrong, right = exchange(app_state, [(body, (("x-api-key", "guess"),)), (body, (("x-api-key", KEY),))], auth)
    assert wrong[:2] == ("UNAUTHENTICATED", "missing or wrong API key: send metadata 'authorization: Bearer <key>' "
                         "or 'x-api-key'")  # fmt: skip
    assert right[0] == "OK"


def test_a_full_door_is_unavailable_with_retry_info(app_state, wrapped_refused, images, monkeypatch):
    monkeypatch.setattr(app_state.activity, "limit", 0)
    ((code, details, _, answer),) = exchange(app_state, [CALLS["plain"](images)])
    assert code == "UNAVAILABLE"
    assert "overloaded" in details
    status = status_pb2.Status.FromString(answer)
    retry = error_details_pb2.RetryInfo()
    assert any(detail.Unpack(retry) for detail in status.details)
    assert retry.retry_delay.seconds >= 1


def test_rpc_metrics_count_the_batch_answers(client, app_state, wrapped_refused, images):
    def counts() -> tuple[float, float]:
        text = client.get("/metrics").text
        return (
            metric_total(text, "inferpool_grpc_requests_total", rpc="ModelInfer", code="OK"),
            metric_total(text, "inferpool_grpc_requests_total", rpc="ModelInfer", code="INVALID_ARGUMENT"),
        )

    ok, invalid = counts()
    exchange(app_state, [CALLS["plain"](images), CALLS["bad shape"](images), CALLS["plain"](images)])
    assert counts() == (ok + 2, invalid + 1)
