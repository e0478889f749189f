"""The repository RPCs' translation, with no server: Triton's messages read as ours on the wire,
each call sent to the supervisor as REST sends it (over a real control channel, answered here),
and the supervisor's answers and the routes' refusals mapped to the codes the docs promise."""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2 as triton

from inferpool.service.apierror import ApiError
from inferpool.service.errors import ErrorAnswer
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.grpc.repository import Repository
from inferpool.service.grpc.status import Refused, code_of
from inferpool.service.processes import supervisor_channel

CONFIG = '{"runtime": {"num_runtimes": 1}}'


def test_tritons_messages_read_as_ours():
    load = triton.RepositoryModelLoadRequest(model_name="scale")
    load.parameters["config"].string_param = CONFIG
    load.parameters["file:1/model.pt2"].bytes_param = b"\x00archive"
    ours = pb.RepositoryModelLoadRequest.FromString(load.SerializeToString())
    assert ours.model_name == "scale"
    assert ours.parameters["config"].string_param == CONFIG
    assert ours.parameters["file:1/model.pt2"].bytes_param == b"\x00archive"
    unload = triton.RepositoryModelUnloadRequest(repository_name="r", model_name="scale")
    unload.parameters["unload_dependents"].bool_param = True
    assert (
        pb.RepositoryModelUnloadRequest.FromString(unload.SerializeToString())
        .parameters["unload_dependents"]
        .bool_param
    )
    index = triton.RepositoryIndexRequest(ready=True)
    assert pb.RepositoryIndexRequest.FromString(index.SerializeToString()).ready
    answer = pb.RepositoryIndexResponse(models=[{"name": "scale", "version": "2", "state": "READY"}])
    assert triton.RepositoryIndexResponse.FromString(answer.SerializeToString()).models[0].version == "2"


def _calls(mode: str, answers: list[dict[str, Any]], *requests: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    """Each (method name, request) called on a Repository whose supervisor gives ``answers`` in
    turn: (what each call returned or raised, what the supervisor received)."""
    ours, theirs = supervisor_channel.pair()
    received: list[dict[str, Any]] = []

    def supervisor() -> None:
        for answer in answers:
            message = supervisor_channel.receive(ours)
            assert message is not None
            received.append(message)
            supervisor_channel.send(ours, answer)

    async def run() -> list[Any]:
        channel = supervisor_channel.Control(theirs, mode)
        channel.start()
        repository, results = Repository(channel), []
        for name, request in requests:
            try:
                results.append(await getattr(repository, name)(request, None))
            except (Refused, ApiError) as exc:
                results.append(exc)
        return results

    thread = threading.Thread(target=supervisor)
    thread.start()
    try:
        results = asyncio.run(run())
    finally:
        thread.join(5)
        ours.close()
        theirs.close()
    return results, received


def test_each_call_goes_to_the_supervisor_as_rests_does():
    load = pb.RepositoryModelLoadRequest(model_name="scale")
    load.parameters["config"].string_param = CONFIG
    load.parameters["file:1/model.pt2"].bytes_param = b"\x00archive"
    entries = [{"name": "scale", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
    answers = [{"status": 200, "body": entries}, {"status": 200, "body": {}}, {"status": 200, "body": {}}]
    results, received = _calls(
        "explicit",
        answers,
        ("index", pb.RepositoryIndexRequest(ready=True)),
        ("load", load),
        ("unload", pb.RepositoryModelUnloadRequest(model_name="scale")),
    )
    assert received == [
        {"op": "index", "ready": True},
        # tritonclient.http's body for the same load: a file's bytes in base64
        {
            "op": "load",
            "name": "scale",
            "body": {"parameters": {"config": CONFIG, "file:1/model.pt2": base64.b64encode(b"\x00archive").decode()}},
        },
        {"op": "unload", "name": "scale"},
    ]
    assert [(m.name, m.version, m.state, m.reason) for m in results[0].models] == [
        ("scale", "1", "UNAVAILABLE", "unloaded")
    ]
    assert results[1:] == [pb.RepositoryModelLoadResponse(), pb.RepositoryModelUnloadResponse()]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, grpc.StatusCode.INVALID_ARGUMENT),  # the load failed: the reason is the message
        (409, grpc.StatusCode.FAILED_PRECONDITION),  # over the CPU budget
        (500, grpc.StatusCode.INTERNAL),  # a new serving process did not start
    ],
)
def test_the_supervisors_refusals_keep_their_message(status, code):
    answer = {"status": status, "body": {"error": "failed to load 'scale': broken"}}
    (refused,), _ = _calls("explicit", [answer], ("load", pb.RepositoryModelLoadRequest(model_name="scale")))
    assert isinstance(refused, Refused)
    assert refused.answer == ErrorAnswer(status, "failed to load 'scale': broken")
    assert code_of(refused.answer) is code


def test_the_routes_refusals_come_first():
    results, received = _calls(
        "none",
        [],
        ("load", pb.RepositoryModelLoadRequest(model_name="scale")),
        ("unload", pb.RepositoryModelUnloadRequest(model_name="scale")),
    )
    assert received == []
    assert all(isinstance(exc, ApiError) and exc.status == 403 for exc in results)
    assert "--model-control-mode explicit" in str(results[0])
    assert code_of(ErrorAnswer(403, "")) is grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(ApiError, match="--model-repository DIR") as missing:
        asyncio.run(Repository(None).index(pb.RepositoryIndexRequest(), None))
    assert missing.value.status == 404
    (named,), received = _calls("explicit", [], ("index", pb.RepositoryIndexRequest(repository_name="other")))
    assert received == []
    assert isinstance(named, ApiError)
    assert named.status == 400
