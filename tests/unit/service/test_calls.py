"""The call envelope (service/calls.py): whatever order a call's answer, its caller's leaving and
its end come in, it is counted in and out of the door once, and recorded once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferpool.engine.errors import Overloaded
from inferpool.harness.metrics import metric_total
from inferpool.service.calls import CLIENT_CLOSED, HttpCall
from inferpool.service.frontdoor import Activity
from inferpool.service.telemetry.metrics import Metrics

SERVICE = Path(__file__).resolve().parents[3] / "service"


def make(activity: Activity, metrics: Metrics, route: str = "/predict") -> HttpCall:
    return HttpCall(activity, metrics, 0.0, route)


def requests(metrics: Metrics, status: str, route: str = "/predict") -> float:
    return metric_total(metrics.render().decode(), "inferpool_requests_total", route=route, status=status)


def test_a_call_is_counted_in_and_out_once_and_recorded_once():
    activity, metrics = Activity(), Metrics()
    call = make(activity, metrics)
    call.enter()
    call.enter()
    assert activity.active == 1
    call.answered()
    call.answered()
    assert activity.active == 0
    call.finish(200)
    call.finish(500)  # a task's end after its answer: nothing more
    call.enter()  # nor a late body
    assert activity.active == 0
    assert requests(metrics, "200") == 1
    assert requests(metrics, "500") == 0


def test_a_call_that_never_answered_is_counted_out_when_it_finishes():
    activity, metrics = Activity(), Metrics()
    call = make(activity, metrics)
    call.enter()
    call.finish(500)
    assert activity.active == 0
    assert requests(metrics, "500") == 1


def test_a_call_never_counted_in_is_never_counted_out():
    activity, metrics = Activity(), Metrics()
    activity.active = 3  # other calls inside
    call = make(activity, metrics)
    call.answered()  # a GET, or an answer before the body was all in
    call.finish(200)
    assert activity.active == 3


@pytest.mark.parametrize("answered", [False, True], ids=["before its answer", "after its answer"])
def test_a_caller_that_left_is_counted_499(answered):
    activity, metrics = Activity(), Metrics()
    call = make(activity, metrics)
    call.enter()
    if answered:
        call.answered()
    call.disconnected = True
    call.finish(500)
    assert activity.active == 0
    assert requests(metrics, str(CLIENT_CLOSED)) == 1
    assert requests(metrics, "500") == 0


def test_a_full_door_refuses_a_call_that_arrives_whole_and_counts_the_shed():
    activity, metrics = Activity(), Metrics()
    activity.admit(1)
    make(activity, metrics).admit()
    assert activity.active == 1
    refused = make(activity, metrics)
    with pytest.raises(Overloaded, match="1 requests are already in progress"):
        refused.admit()
    refused.finish(503)
    assert activity.active == 1  # the refused call was never in
    assert metric_total(metrics.render().decode(), "inferpool_rejections_total", reason="load_shed") == 1


def test_only_the_door_changes_its_count():
    # Issue 56: the count was changed at seven sites in three files, and one fix (6c18bf8) had to
    # correct four files at once. Call.enter and Call.answered are the only two now; every
    # way in goes through its Call, which owns both directions (tests set the count directly: they
    # are not service/).
    def sites(pattern: str) -> list[str]:
        found = re.compile(pattern)
        return [
            f"{path.relative_to(SERVICE)}:{number}"
            for path in sorted(SERVICE.rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if found.search(line.split("#", 1)[0])
        ]

    changed = sites(r"\.active\s*[-+]=")
    assert [site.split(":")[0] for site in changed] == ["calls.py"] * 2, changed
    assert [site.split(":")[0] for site in sites(r"\.active\s*=(?!=)")] == ["frontdoor.py"]  # its start at 0
