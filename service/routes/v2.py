"""Open Inference Protocol v2 (REST), as Triton, KServe and MLServer speak it.

Errors are ``{"error": "..."}`` on every path (the protocol's shape, and the service's), with
404 for an unknown model or version and 503 while not ready.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from engine import EngineClient
from service.apierror import ApiError
from service.codec import json_response, read_body
from service.deps import HostDep, host_of, metrics_of
from service.errors import ERROR_RESPONSES
from service.timing import deadline, record
from service.v2codec import HEADER_LENGTH, encode_response, metadata, parse_request

router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"], responses=ERROR_RESPONSES)
VERSION = "1"  # one version per model for now; /versions/1 and no version address it


def _model(request: Request, name: str, version: str | None) -> EngineClient:
    model = host_of(request).get(name)
    if version not in (None, VERSION):
        raise ApiError(404, f"model {name!r} has no version {version!r}; it has {VERSION!r}", "unknown_model")
    return model


@router.get("", summary="Server metadata")
async def server_metadata(request: Request) -> Response:
    return json_response({"name": "inferpool", "version": request.app.version, "extensions": ["binary_tensor_data"]})


@router.get("/health/live", summary="Server liveness")
async def live(host: HostDep) -> Response:
    return json_response({"live": host.status != "failed"}, 200 if host.status != "failed" else 503)


@router.get("/health/ready", summary="Server readiness")
async def ready(host: HostDep) -> Response:
    ok = host.status == "ready"
    return json_response({"ready": ok}, 200 if ok else 503, None if ok else {"Retry-After": "1"})


@router.get("/models/{name}", summary="Model metadata")
@router.get("/models/{name}/versions/{version}", summary="Model metadata (one version)")
async def model_metadata(request: Request, name: str, version: str | None = None) -> Response:
    model = _model(request, name, version)
    return json_response(metadata(model.name, model.schema, VERSION, model.info.handler))


@router.get("/models/{name}/config", summary="Model configuration")
@router.get("/models/{name}/versions/{version}/config", summary="Model configuration (one version)")
async def model_config(request: Request, name: str, version: str | None = None) -> Response:
    """How the model is served, after Triton's model configuration: the backend serving it and,
    in `backend_selection`, the configured one and (for `auto`) every candidate's timings."""
    model = _model(request, name, version)
    info = model.info
    return json_response(
        {
            "name": info.name,
            "backend": info.backend,
            "dispatch": info.dispatch,
            "max_batch_size": info.max_batch_size,
            "runtimes": info.runtimes,
            "intra_op_threads": info.intra_op_threads,
            "backend_selection": info.backend_selection,
            "dispatch_selection": info.dispatch_selection,
        }
    )


@router.get("/models/{name}/ready", summary="Model readiness")
@router.get("/models/{name}/versions/{version}/ready", summary="Model readiness (one version)")
async def model_ready(request: Request, name: str, version: str | None = None) -> Response:
    _model(request, name, version)  # 503 while loading, 404 if unknown
    return json_response({"name": name, "ready": True})


@router.post("/models/{name}/infer", summary="Inference")
@router.post("/models/{name}/versions/{version}/infer", summary="Inference (one version)")
async def infer(request: Request, name: str, version: str | None = None) -> Response:
    """JSON tensors, or the binary tensor data extension (`Inference-Header-Content-Length`)."""
    model = _model(request, name, version)
    metrics = metrics_of(request)
    received = time.perf_counter()
    body = await read_body(request, host_of(request).settings.max_body_bytes)
    parsed_request = parse_request(body, request.headers.get(HEADER_LENGTH))
    parsed = time.perf_counter()
    # The protocol's "timeout" parameter is in microseconds (as Triton's clients send it).
    timeout_us = parsed_request.parameters.get("timeout")
    timeout_ms = (
        None if timeout_us is None else (timeout_us / 1e3 if isinstance(timeout_us, int | float) else timeout_us)
    )
    when = deadline(request, host_of(request).settings.request_timeout_ms, timeout_ms)
    prediction = await model.infer(parsed_request.inputs, when)
    encoding = time.perf_counter()
    content, header_length = encode_response(model.name, parsed_request, prediction.outputs, VERSION)
    headers = record(
        request, metrics, model.name, prediction,
        received=received, parsed=parsed, encoding=encoding, encoded=time.perf_counter(),
    )  # fmt: skip
    metrics.refresh(model)
    if header_length is None:
        return Response(content, media_type="application/json", headers=headers)
    headers["Inference-Header-Content-Length"] = str(header_length)
    return Response(content, media_type="application/octet-stream", headers=headers)
