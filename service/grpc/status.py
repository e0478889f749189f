"""Errors as gRPC statuses. The answer is the one the REST front end gives (inferpool.service.errors:
same reasons, same words, same metrics), mapped by its HTTP status to a gRPC code; a refusal
worth retrying carries google.rpc.RetryInfo, gRPC's standard form of Retry-After."""

from __future__ import annotations

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from inferpool.service.errors import ErrorAnswer

CODES: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,  # model control is off (the repository's load and unload)
    404: grpc.StatusCode.NOT_FOUND,
    # A model set over the CPU budget. Not RESOURCE_EXHAUSTED: clients and retry policies take
    # that for a passing shortage worth retrying (and here it is already a message too large),
    # while this call fails the same way until the served set changes (unload a model first).
    409: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def code_of(answer: ErrorAnswer) -> grpc.StatusCode:
    return CODES.get(answer.status, grpc.StatusCode.UNKNOWN)


def status_of(answer: ErrorAnswer) -> grpc.Status:
    """The status to abort with: code, message (naming the input when one is at fault) and,
    for a refusal that says when to come back, RetryInfo."""
    code = code_of(answer)
    message = answer.message if answer.input is None else f"{answer.message} (input '{answer.input}')"
    status = status_pb2.Status(code=code.value[0], message=message)
    retry_after = (answer.headers or {}).get("Retry-After")
    if retry_after is not None:
        detail = AnyMessage()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=Duration(seconds=int(retry_after))))
        status.details.append(detail)
    return rpc_status.to_status(status)


class Aborted(Exception):
    """A call ended with ``status``: what a front end's context raises from
    ``abort_with_status`` (the native one's), and what ``Servicer.infer_now`` raises."""

    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status


class Refused(Exception):
    """A call answered with ``answer`` as it is: the refusal was counted, if at all, where it
    was decided (the key check; the supervisor's answer to a repository call, which REST does
    not count either)."""

    def __init__(self, answer: ErrorAnswer) -> None:
        super().__init__(answer.message)
        self.answer = answer
