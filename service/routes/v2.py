"""Open Inference Protocol v2 (REST), as Triton, KServe and MLServer speak it.

Errors are ``{"error": "..."}`` on every path (the protocol's shape, and the service's), with
404 for an unknown model or version and 503 while not ready.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope

from inferpool.engine import EngineClient
from inferpool.engine.requests import request_id
from inferpool.service.codec import json_response, read_body
from inferpool.service.deps import HostDep, host_of
from inferpool.service.errors import ERROR_RESPONSES
from inferpool.service.fastpath import documentation_only
from inferpool.service.host import ModelHost
from inferpool.service.metrics import Metrics
from inferpool.service.rawasgi import BINARY, JSON, Answer, RawRoute, request_headers
from inferpool.service.timing import TIMEOUT_HEADER, deadline, record
from inferpool.service.v2codec import HEADER_LENGTH, encode_response, metadata, parse_request
from inferpool.service.v2types import TensorMeta

router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"], responses=ERROR_RESPONSES)
VERSION = "1"  # the version of the config's models; a repository's have their folders' numbers
HEADER_LENGTH_RAW = HEADER_LENGTH.encode()
HEADERS = frozenset({b"content-length", b"content-encoding", TIMEOUT_HEADER, HEADER_LENGTH_RAW})


class ExpectedInputs:
    """Each model's inputs as its metadata declares them (what a request's must match), built
    on a model's first request; REST and gRPC infer both check against it."""

    def __init__(self) -> None:
        # By id: two versions of a model may differ, and a process's models never change.
        self._tables: dict[int, dict[str, TensorMeta]] = {}

    def __call__(self, model: EngineClient) -> dict[str, TensorMeta]:
        found = self._tables.get(id(model))
        if found is None:
            inputs = metadata(model.name, model.schema, VERSION, model.info.handler)["inputs"]
            found = self._tables[id(model)] = TensorMeta.table(inputs)
        return found


def find_model(host: ModelHost, name: str, version: str | None) -> EngineClient:
    """The model ``name`` at ``version`` (its latest without); 404 for either unknown."""
    return host.get(name, version)


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
    host = host_of(request)
    model = find_model(host, name, version)
    return json_response(metadata(model.name, model.schema, host.version_of(model), model.info.handler))


@router.get("/models/{name}/config", summary="Model configuration")
@router.get("/models/{name}/versions/{version}/config", summary="Model configuration (one version)")
async def model_config(request: Request, name: str, version: str | None = None) -> Response:
    """How the model is served, after Triton's model configuration: the backend serving it and,
    in `backend_selection`, the configured one and (for `auto`) every candidate's timings."""
    model = find_model(host_of(request), name, version)
    info = model.info
    return json_response(
        {
            "name": info.name,
            "backend": info.backend,
            "dispatch": info.dispatch,
            "max_batch_size": info.max_batch_size,
            "runtimes": info.runtimes,
            "intra_op_threads": info.intra_op_threads,
            "capacity": info.capacity,
            "backend_selection": info.backend_selection,
            "dispatch_selection": info.dispatch_selection,
            "wide_selection": info.wide_selection,
            "precision_selection": info.precision_selection,
            "deadline_floor_ms": info.deadline_floor_ms,
        }
    )


@router.get("/models/{name}/ready", summary="Model readiness")
@router.get("/models/{name}/versions/{version}/ready", summary="Model readiness (one version)")
async def model_ready(request: Request, name: str, version: str | None = None) -> Response:
    """200 while the version (the latest without one) takes requests whichever serving process
    gets them: loaded and warm, its pool whole, and every process serving the same model set
    (not during a repository change's rollout); 503 with `Retry-After` otherwise, 404 for a
    model or version not served."""
    host = host_of(request)
    model = find_model(host, name, version)  # 503 while loading, 404 if unknown
    ok = host.ready(model)
    body = {"name": model.name, "version": host.version_of(model), "ready": ok}
    return json_response(body, 200 if ok else 503, None if ok else {"Retry-After": "1"})


@router.post("/models/{name}/infer", summary="Inference")
@router.post("/models/{name}/versions/{version}/infer", summary="Inference (one version)")
async def infer(request: Request, name: str, version: str | None = None) -> Response:
    """JSON tensors, or the binary tensor data extension (`Inference-Header-Content-Length`)."""
    documentation_only()


class Infer(RawRoute):
    """The raw ASGI handler of both infer routes (service/fastpath.py says why and how)."""

    def __init__(self, host: ModelHost, metrics: Metrics) -> None:
        super().__init__(host, metrics)
        self.expected = ExpectedInputs()

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        metrics = self.metrics
        params = scope["path_params"]
        model = find_model(self.host, params["name"], params.get("version"))
        headers = request_headers(scope, HEADERS)
        received = time.perf_counter()
        body = await read_body(
            receive, headers.get(b"content-length"), self.max_body_bytes, headers.get(b"content-encoding")
        )
        length = headers.get(HEADER_LENGTH_RAW)
        json_length = None if length is None else length.decode("latin-1")
        parsed_request = parse_request(body, json_length, self.expected(model))
        parsed = time.perf_counter()
        when = deadline(
            headers.get(TIMEOUT_HEADER), self.timeout_ms, parsed_request.timeout_ms, floor_ms=model.deadline_floor_ms
        )
        prediction = await model.infer(parsed_request.inputs, when, request_id.get())
        encoding = time.perf_counter()
        version = self.host.version_of(model)
        content, header_length = encode_response(model.name, parsed_request, prediction.outputs, version)
        timing = record(
            scope, metrics, model.name, prediction,
            received=received, parsed=parsed, encoding=encoding, encoded=time.perf_counter(),
        )  # fmt: skip
        metrics.refresh(model)
        extra = [(b"server-timing", timing.encode())]
        if header_length is None:
            return content, JSON, extra
        extra.append((HEADER_LENGTH_RAW, b"%d" % header_length))
        return content, BINARY, extra
