"""App state for routes: plain accessors, and ``Annotated`` dependencies built on them.

The dependencies are ``async def`` because FastAPI runs a plain ``def`` dependency on its
thread pool, a thread hand-off per request. The hot ``/predict`` route calls the accessors
directly: dependency solving alone measured ~20 % of that route's own CPU time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from inferpool.service.frontdoor import FrontDoor
from inferpool.service.telemetry.metrics import Metrics

if TYPE_CHECKING:  # the host loads models (torch); the routes only ask it for them
    from inferpool.service.models.host import ModelHost


def host_of(request: Request) -> ModelHost:
    host: ModelHost = request.app.state.host
    return host


def metrics_of(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def _door(request: Request) -> FrontDoor:
    door: FrontDoor = request.app.state.door
    return door


async def _host(request: Request) -> ModelHost:
    return host_of(request)


async def _metrics(request: Request) -> Metrics:
    return metrics_of(request)


# A string: FastAPI needs only the Depends here, and the class is not imported at run time.
HostDep = Annotated["ModelHost", Depends(_host)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
DoorDep = Annotated[FrontDoor, Depends(_door)]
