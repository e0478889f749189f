"""The v2 gRPC methods, on the same host, engine client, door and error table as REST.

Each method is wrapped once (``Servicer.handler``): the API key is checked (by the rule HTTP
applies: service/auth.py), the call is timed and counted by method and status code, and any
error becomes its gRPC status at that one place (service/grpc_v2/status.py). ModelInfer and
the repository methods (service/grpc_v2/repository.py) come in through the door HTTP's POSTs use
(the ``Activity`` count, so shedding, the drain and a retiring process see both front ends).
ModelInfer takes its deadline from the gRPC deadline or the v2 "timeout" parameter, and reports
its phases like the REST route.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, NamedTuple

import grpc

from inferpool.engine import NotReady, Overloaded
from inferpool.engine.requests import request_id
from inferpool.service.auth import ApiKey
from inferpool.service.control import Control
from inferpool.service.errors import ErrorAnswer, answer_for
from inferpool.service.grpc_v2 import inference_pb2 as pb
from inferpool.service.grpc_v2 import tensors
from inferpool.service.grpc_v2.repository import Repository
from inferpool.service.grpc_v2.status import Refused, code_of, status_of
from inferpool.service.host import ModelHost
from inferpool.service.metrics import Inference, Metrics
from inferpool.service.middleware import Activity, client_request_id, request_ids
from inferpool.service.observe import Observer
from inferpool.service.routes.v2 import ExpectedInputs, find_model
from inferpool.service.timing import deadline
from inferpool.service.v2codec import metadata

log = logging.getLogger(__name__)
SERVICE = "inference.GRPCInferenceService"
# The context is grpc.aio's or the native front end's (native.Context): the methods use only what both have.
Method = Callable[[Any, Any], Awaitable[Any]]
# Set by a ModelInfer that ran the model, read by its wrapper (the same task, so the same context).
_inference: ContextVar[Inference | None] = ContextVar("grpc_inference", default=None)


class Served(NamedTuple):
    method: Method
    request: Any
    """The request's message class (its ``FromString`` decodes the wire bytes, with upb)."""
    response: Any


UNAUTHENTICATED = ErrorAnswer(
    401, "missing or wrong API key: send metadata 'authorization: Bearer <key>' or 'x-api-key'"
)
# The REST twins of the methods that can be exempt from the API key: a method is exempt when
# its twin is (auth_exempt). The standard health service never asks for it: probes carry no secret.
# The repository methods have no twin here: they need the key whenever one is set, as REST's do.
REST_TWIN = {"ServerLive": "/v2/health/live", "ServerReady": "/v2/health/ready"}


class Servicer:
    def __init__(
        self, host: ModelHost, metrics: Metrics, activity: Activity, *, version: str, auth: ApiKey | None,
        timeout_ms: float, control: Control | None = None, observer: Observer | None = None,
    ) -> None:  # fmt: skip
        self.host = host
        self.metrics = metrics
        self.activity = activity
        self.version = version
        self.auth = auth
        self.timeout_ms = timeout_ms
        self.observer = observer
        self.repository = Repository(control)
        self.retired: Callable[[], None] = lambda: None
        """Called when a call ends in a process that a newer one replaces (set by the front end)."""
        self.expected = ExpectedInputs()
        self._ids = request_ids(itertools.count(), tag="g")  # "g": HTTP's ids count on their own serial

    def methods(self) -> dict[str, Served]:
        """Every v2 method by name, behind the key check, the metrics and the error boundary:
        the one table both front ends serve (service/grpc_v2/server.py, native.py)."""
        repository = self.repository
        methods: dict[str, tuple[Method, Any, Any]] = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
            "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest, pb.ServerMetadataResponse),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
            "ModelInfer": (self.admitted(self.model_infer), pb.ModelInferRequest, pb.ModelInferResponse),
            "RepositoryIndex": (self.admitted(repository.index), pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
            "RepositoryModelLoad": (
                self.admitted(repository.load),
                pb.RepositoryModelLoadRequest,
                pb.RepositoryModelLoadResponse,
            ),
            "RepositoryModelUnload": (
                self.admitted(repository.unload),
                pb.RepositoryModelUnloadRequest,
                pb.RepositoryModelUnloadResponse,
            ),
        }
        return {
            name: Served(self.handler(name, method), request, response)
            for name, (method, request, response) in methods.items()
        }

    def handlers(self) -> grpc.GenericRpcHandler:
        """The methods as grpcio's server takes them."""
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                name: grpc.unary_unary_rpc_method_handler(
                    served.method,
                    request_deserializer=served.request.FromString,
                    response_serializer=served.response.SerializeToString,
                )
                for name, served in self.methods().items()
            },
        )

    def handler(self, name: str, method: Method) -> Method:
        """``method`` behind the key check, the metrics and the error boundary."""
        auth, path = self.auth, REST_TWIN.get(name)

        async def handle(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            code = "OK"
            response = None
            try:
                if auth is not None and not auth.admits(path, context.invocation_metadata() or ()):
                    self.metrics.observe_error("auth")
                    raise Refused(UNAUTHENTICATED)
                response = await method(request, context)
                return response
            except asyncio.CancelledError:  # the caller went away or its deadline passed
                code = "CANCELLED"
                raise
            except Refused as refused:
                code = code_of(refused.answer).name
                await context.abort_with_status(status_of(refused.answer))
            except Exception as exc:  # every error becomes a status here
                answer = answer_for(exc, self.metrics)
                if answer is None:
                    log.exception("unhandled error in gRPC %s", name)
                    self.metrics.observe_error("internal")
                    answer = ErrorAnswer(500, "internal server error; the server log has the details")
                code = code_of(answer).name
                await context.abort_with_status(status_of(answer))
            finally:
                ended = time.perf_counter()
                self.metrics.observe_rpc(name, code, ended - started, _inference.get())
                if self.observer is not None:
                    metadata = context.invocation_metadata() or ()
                    self.observer.rpc(name, code, metadata, started, ended, _inference.get(), request, response)
                # Closing without a drain: retired (service/retire.py), which the supervisor says
                # before it answers a load or unload this process asked. HTTP answers then say
                # Connection: close; gRPC's counterpart is to stop taking calls (GOAWAY), so that
                # the caller's next call goes to a process that serves the new set.
                if self.activity.closing and not self.host.draining:
                    self.retired()
                    await asyncio.sleep(0)  # the stop sends its GOAWAY before this call's answer

        return handle

    async def server_live(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.host.status != "failed")

    async def server_ready(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.host.status == "ready")

    async def model_ready(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        # As REST's /v2/models/{name}[/versions/{v}]/ready: an unknown model is NOT_FOUND.
        try:
            model = find_model(self.host, request.name, request.version or None)
        except NotReady:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=self.host.ready(model))

    async def server_metadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="inferpool", version=self.version)

    async def model_metadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        model = find_model(self.host, request.name, request.version or None)
        found = metadata(model.name, model.schema, self.host.version_of(model), model.info.handler)
        response = pb.ModelMetadataResponse(name=found["name"], versions=found["versions"], platform=found["platform"])
        for field in ("inputs", "outputs"):
            for tensor in found[field]:
                getattr(response, field).add(name=tensor["name"], datatype=tensor["datatype"], shape=tensor["shape"])
        return response

    def admitted(self, method: Method) -> Method:
        """``method`` behind the door: refused when the process holds its limit already, and
        counted while it runs (a retiring process waits for it before it exits)."""
        activity = self.activity

        async def counted(request: Any, context: Any) -> Any:
            limit = activity.limit
            if limit is not None and activity.active >= limit:
                self.metrics.observe_error("load_shed")
                raise Overloaded(f"the server holds {limit} requests already; retry later or elsewhere")
            activity.active += 1
            try:
                return await method(request, context)
            finally:
                activity.active -= 1

        return counted

    async def model_infer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        received = time.perf_counter()
        rid = client_request_id(context.invocation_metadata() or ()) or request.id or next(self._ids)
        request_id.set(rid)
        context.set_trailing_metadata((("x-request-id", rid),))
        model = find_model(self.host, request.model_name, request.model_version or None)
        decoded = tensors.decode(request, self.expected(model))
        parsed = time.perf_counter()
        when = deadline(None, self.timeout_ms, decoded.timeout_ms, floor_ms=model.deadline_floor_ms)
        remaining = context.time_remaining()
        if remaining is not None:  # the caller's own deadline, when it set one
            when = min(when or float("inf"), time.monotonic() + remaining)
        prediction = await model.infer(decoded.inputs, when, rid)
        encoding = time.perf_counter()
        response = tensors.encode(
            model.name, self.host.version_of(model), request.id, prediction.outputs, decoded.outputs
        )
        inference = Inference(
            model=model.name,
            decode_seconds=parsed - received + prediction.validate_seconds,
            queue_seconds=prediction.queue_seconds,
            compute_seconds=prediction.compute_seconds,
            encode_seconds=time.perf_counter() - encoding,
            batch_size=prediction.batch_size,
            batch_seconds=prediction.batch_seconds,
            marks=(received, parsed, encoding, prediction.dispatched),
        )
        self.metrics.observe_inference(inference)
        _inference.set(inference)
        self.metrics.refresh(model)
        return response
