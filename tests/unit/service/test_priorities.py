"""A request's priority level as the front door reads it (service/priorities.py), and the door's
count shedding the lowest level first."""

from __future__ import annotations

import pytest

from inferpool.engine.errors import Overloaded
from inferpool.harness.metrics import metric_total
from inferpool.service.apierror import ApiError
from inferpool.service.frontdoor import Activity
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.grpc.rpc_call import RpcCall
from inferpool.service.priorities import Priorities
from inferpool.service.telemetry.metrics import Metrics

THREE = Priorities(levels=3, default=2)


def test_none_given_or_zero_is_the_default():
    assert THREE.level(None, None) == 2
    assert THREE.level(0, None) == 2
    assert THREE.level(None, b"0") == 2


def test_a_whole_float_is_the_integer_json_schema_counts_it_as():
    """The spec's "integer" takes 2.0 as 2 (JSON Schema cannot tell them apart): so does the server."""
    assert THREE.level(2.0, None) == 2
    assert THREE.level(0.0, None) == 2  # the default


def test_the_parameter_wins_over_the_header():
    assert THREE.level(1, b"3") == 1
    assert THREE.level(None, b" 3 ") == 3
    assert THREE.level(None, "1") == 1  # gRPC metadata is text


@pytest.mark.parametrize(
    ("parameter", "header", "says"),
    [
        (4, None, "parameter 'priority' 4 is not a level"),
        (-1, None, "parameter 'priority' -1 is not a level"),
        (True, None, "must be a whole number; got True"),
        (1.5, None, "must be a whole number; got 1.5"),
        (4.0, None, "parameter 'priority' 4.0 is not a level"),
        ("1", None, "must be a whole number; got '1'"),
        (None, b"high", "X-Request-Priority 'high' is not a whole number"),
        (None, b"-1", "X-Request-Priority '-1' is not a whole number"),
        (None, b"9", "X-Request-Priority 9 is not a level"),
    ],
)
def test_a_bad_priority_is_a_400_saying_what_to_send(parameter, header, says):
    with pytest.raises(ApiError) as caught:
        THREE.level(parameter, header)
    assert caught.value.status == 400
    assert caught.value.reason == "invalid_priority"
    assert says in str(caught.value)
    assert "send 1 (the highest) to 3 (the lowest), or 0 for the default (2)" in str(caught.value)


def test_the_door_sheds_the_lowest_level_first():
    activity = Activity()
    activity.admit(10)
    activity.priorities = Priorities(levels=2, default=1)
    activity.active = 5
    assert [activity.level_of(header) for header in (None, b"1", b"2", b"bad")] == [1, 1, 2, 1]
    assert activity.full(1) is None
    assert activity.full(2) == 5  # half the door for the low level
    activity.active = 10
    assert activity.full(1) == 10
    activity.priorities = Priorities()
    assert activity.level_of(b"2") == 0  # one level: no header changes anything


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


def _grpc_call(activity: Activity, metrics: Metrics, priority: int | None, metadata=()) -> RpcCall:
    request = pb.ModelInferRequest(model_name="digits")
    if priority is not None:
        request.parameters["priority"].uint64_param = priority  # as Triton's client sends it
    return RpcCall(activity, metrics, 0.0, "ModelInfer", request, _Context(metadata), None)


def test_a_grpc_call_is_shed_at_the_door_by_its_level():
    activity, metrics = Activity(), Metrics()
    activity.admit(4)
    activity.priorities = Priorities(levels=2, default=1)
    activity.active = 2
    _grpc_call(activity, metrics, 1).admit()  # the high level: room for 4
    with pytest.raises(Overloaded):
        _grpc_call(activity, metrics, 2).admit()  # the low level: room for 2, 3 inside
    with pytest.raises(Overloaded):
        _grpc_call(activity, metrics, None, (("x-request-priority", "2"),)).admit()
    _grpc_call(activity, metrics, None).admit()  # none named: the default, the high level
    assert activity.active == 4
    text = metrics.render().decode()
    assert metric_total(text, "inferpool_priority_requests_total", priority="2", outcome="shed") == 2
