"""Open Inference Protocol v2 (REST), as Triton, KServe and MLServer speak it.

Errors are ``{"error": "..."}`` on every path (the protocol's shape, and the service's), with
404 for an unknown model or version and 503 while not ready.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope

from inferpool.engine.client import EngineClient, request_id
from inferpool.service.errors import ERROR_RESPONSES
from inferpool.service.frontdoor import FrontDoor, Served
from inferpool.service.http.codec import json_response, read_body
from inferpool.service.http.deps import DoorDep, host_of
from inferpool.service.http.fastpath import documentation_only
from inferpool.service.http.lane_routes import MOST_PATHS, Decoded
from inferpool.service.http.rawasgi import BINARY, JSON, Answer, RawRoute, request_headers, timed
from inferpool.service.telemetry.logs import model_served
from inferpool.service.timing import TIMEOUT_HEADER
from inferpool.service.v2.codec import HEADER_LENGTH, InferRequest, encode_response, parse_request

if TYPE_CHECKING:  # the host loads models (torch); a front end only asks it for them
    from inferpool.service.models.host import ModelHost

router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"], responses=ERROR_RESPONSES)
HEADER_LENGTH_RAW = HEADER_LENGTH.encode()


def find_model(host: ModelHost, name: str, version: str | None) -> EngineClient:
    """The model ``name`` at ``version`` (its latest without); 404 for either unknown."""
    return host.get(name, version)


@router.get("", summary="Server metadata")
async def server_metadata(request: Request) -> Response:
    return json_response({"name": "inferpool", "version": request.app.version, "extensions": ["binary_tensor_data"]})


@router.get("/health/live", summary="Server liveness")
async def live(door: DoorDep) -> Response:
    live = door.live
    return json_response({"live": live}, 200 if live else 503)


@router.get("/health/ready", summary="Server readiness")
async def ready(door: DoorDep) -> Response:
    ok = door.ready
    return json_response({"ready": ok}, 200 if ok else 503, None if ok else {"Retry-After": "1"})


@router.get("/models/{name}", summary="Model metadata")
@router.get("/models/{name}/versions/{version}", summary="Model metadata (one version)")
async def model_metadata(door: DoorDep, name: str, version: str | None = None) -> Response:
    return json_response(door.model_metadata(name, version))


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
            "batch_selection": info.batch_selection,
            "wide_selection": info.wide_selection,
            "precision_selection": info.precision_selection,
            "deadline_floor_ms": info.deadline_floor_ms,
        }
    )


@router.get("/models/{name}/ready", summary="Model readiness")
@router.get("/models/{name}/versions/{version}/ready", summary="Model readiness (one version)")
async def model_ready(door: DoorDep, name: str, version: str | None = None) -> Response:
    """200 while the version (the latest without one) takes requests whichever serving process
    gets them: loaded and warm, its pool whole, and every process serving the same model set
    (not during a repository change's rollout); 503 with `Retry-After` otherwise, 404 for a
    model or version not served."""
    found = door.model_ready(name, version)  # 503 while loading, 404 if unknown
    ok = found.ready
    body = {"name": found.name, "version": found.version, "ready": ok}
    return json_response(body, 200 if ok else 503, None if ok else {"Retry-After": "1"})


@router.post("/models/{name}/infer", summary="Inference")
@router.post("/models/{name}/versions/{version}/infer", summary="Inference (one version)")
async def infer(request: Request, name: str, version: str | None = None) -> Response:
    """JSON tensors, or the binary tensor data extension (`Inference-Header-Content-Length`)."""
    documentation_only()


class Infer(RawRoute):
    """The raw ASGI handler of both infer routes (service/http/fastpath.py says why and how), and
    the lane's (service/http/lane.py)."""

    def __init__(self, door: FrontDoor) -> None:
        super().__init__(door)
        self._by_path: dict[bytes, tuple[object, Served]] = {}
        """The lane's paths -> the host's model set when resolved, and the model resolved."""

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        door = self.door
        params = scope["path_params"]
        served = door.resolve(params["name"], params.get("version"))
        headers = request_headers(scope)
        received = time.perf_counter()
        body = await read_body(
            receive, headers.get(b"content-length"), self.max_body_bytes, headers.get(b"content-encoding")
        )
        request = _parsed(served, body, headers)
        answer, inference = await door.infer(
            served, request.inputs, _encode, request, received=received, parsed=time.perf_counter(),
            rid=request_id.get(), timeout=headers.get(TIMEOUT_HEADER), timeout_ms=request.timeout_ms,
            priority=request.parameters.get("priority"),
        )  # fmt: skip
        return _answer(answer, timed(scope, inference))

    def decode(
        self, found: re.Match[bytes], request_body: bytearray | memoryview, headers: dict[bytes, bytes]
    ) -> Decoded:
        """The lane's: the model and version its path names, and the body parsed as ``answer`` parses it."""
        served = self._resolved(found)
        request = _parsed(served, request_body, headers)
        priority = request.parameters.get("priority")
        timeout = headers.get(TIMEOUT_HEADER)
        return Decoded(served, request.inputs, _encode, request, timeout, request.timeout_ms, priority)

    def _resolved(self, found: re.Match[bytes]) -> Served:
        """``door.resolve`` of the model and version the lane's path names, kept by path for as
        long as the host serves the same model set (its ``models`` the same dict: a load or an
        unload makes a new one), as the lane keeps the path's match: no decoding and no look-ups
        of the host's. Still NotReady while the host is not serving, still labelling the request."""
        host = self.door.host
        kept = self._by_path.get(found.string)
        if kept is not None and kept[0] is host.models:
            host.serving()
            served = kept[1]
            model_served.set(served.labels)
            return served
        version = found.group(2)
        models = host.models  # before resolving: a set made meanwhile is then never taken for this one
        served = self.door.resolve(found.group(1).decode(), None if version is None else version.decode())
        if len(self._by_path) >= MOST_PATHS:
            self._by_path.clear()
        self._by_path[found.string] = models, served
        return served

    def data_offset(self, headers: dict[bytes, bytes], length: int) -> int | None:
        """The lane's: the binary data follows the JSON header, whose length its header gives (one
        that is not a length within the body is left for ``decode`` to refuse)."""
        value = headers.get(HEADER_LENGTH_RAW)
        if value is None or not value.isdigit() or len(value) > 9:
            return None
        offset = int(value)
        return offset if 0 < offset < length else None

    def answer_of(self, encoded: tuple[bytes, int | None], timing: tuple[bytes, bytes]) -> Answer:
        return _answer(encoded, timing)


def _parsed(served: Served, body: bytearray | memoryview, headers: dict[bytes, bytes]) -> InferRequest:
    length = headers.get(HEADER_LENGTH_RAW)
    return parse_request(body, None if length is None else length.decode("latin-1"), served.expected())


def _answer(encoded: tuple[bytes, int | None], timing: tuple[bytes, bytes]) -> Answer:
    content, header_length = encoded
    if header_length is None:
        return content, JSON, [timing]
    return content, BINARY, [timing, (HEADER_LENGTH_RAW, b"%d" % header_length)]


def _encode(served: Served, outputs: Mapping[str, Any], request: InferRequest) -> tuple[bytes, int | None]:
    return encode_response(served.name, request, outputs, served.version)
