"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from inferpool.service.http.codec import json_response
from inferpool.service.http.deps import DoorDep, HostDep, MetricsDep
from inferpool.service.http.openapi import HEALTH_RESPONSES

router = APIRouter()


@router.get("/health/live", summary="Is the process able to serve at all?", responses=HEALTH_RESPONSES)
async def live(host: HostDep) -> Response:
    """200 unless the model failed to load, in which case a restart is the fix (503)."""
    status = 200 if host.status.live else 503
    return json_response({"status": host.status, "error": host.error}, status)


@router.get("/health/ready", summary="Can this replica take traffic now?", responses=HEALTH_RESPONSES)
async def ready(host: HostDep) -> Response:
    """200 once the model is loaded and every runtime is warm; 503 before that and while
    shutting down, so a load balancer routes around this replica."""
    ok = host.status.ready
    headers = None if ok else {"Retry-After": "1"}
    return json_response({"status": host.status, "error": host.error}, 200 if ok else 503, headers)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(metrics: MetricsDep, door: DoorDep) -> Response:
    for served in door.served():  # every version, not only each name's latest
        metrics.refresh(served.model, served.labels, force=True)
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
