"""The v2 gRPC methods, on the same host, engine client, door and error table as REST.

Each method is wrapped once (``Servicer.handler``), an adapter to its call's envelope
(service/grpc/rpc_call.py, service/calls.py): the API key is checked (by the rule HTTP applies:
service/auth.py), the call is timed and counted by method and status code, and any error becomes
its gRPC status at that one place (service/grpc/status.py). ModelInfer and
the repository methods (service/grpc/repository.py) come in through the door HTTP's POSTs use
(the ``Activity`` count, so shedding, the drain and a retiring process see both front ends).
ModelInfer only decodes and encodes: the front door (service/frontdoor.py) resolves its model
and runs it, with its deadline from the gRPC deadline or the v2 "timeout" parameter, and
observes its phases as for REST.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import grpc

from inferpool.engine.errors import NotReady
from inferpool.service import frontdoor
from inferpool.service.auth import ApiKey
from inferpool.service.errors import ErrorAnswer, answer_for
from inferpool.service.frontdoor import FrontDoor, request_ids
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.grpc import tensors
from inferpool.service.grpc.repository import Repository
from inferpool.service.grpc.rpc_call import RpcCall
from inferpool.service.grpc.status import Aborted, Refused, code_of, status_of
from inferpool.service.processes.supervisor_channel import Control
from inferpool.service.telemetry.observe import Observer

log = logging.getLogger(__name__)
SERVICE = "inference.GRPCInferenceService"
# A method's context is its call (rpc_call.RpcCall), which passes grpc.aio's context methods through.
Method = Callable[[Any, Any], Awaitable[Any]]


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
GOAWAY_SECONDS = 0.05
"""How long a retired process's call waits before its answer, for grpcio's GOAWAY to go first."""


class Servicer:
    def __init__(
        self, door: FrontDoor, *, version: str, auth: ApiKey | None, control: Control | None = None,
        observer: Observer | None = None,
    ) -> None:  # fmt: skip
        self.door = door
        self.host = door.host
        self.metrics = door.metrics
        self.activity = door.activity
        self.version = version
        self.auth = auth
        self.observer = observer
        self.repository = Repository(control)
        self._ids = request_ids(itertools.count(), tag="g")  # "g": HTTP's ids count on their own serial

    def methods(self) -> dict[str, Served]:
        """Every v2 method by name, behind the key check, the metrics and the error boundary:
        the one table both front ends serve (service/grpc/server.py, native.py). Those that come
        in through the door (admitted: counted while they run, refused when the process holds its
        limit already) are ModelInfer and the repository's."""
        repository = self.repository
        methods: dict[str, tuple[Method, bool, Any, Any]] = {
            "ServerLive": (self.server_live, False, pb.ServerLiveRequest, pb.ServerLiveResponse),
            "ServerReady": (self.server_ready, False, pb.ServerReadyRequest, pb.ServerReadyResponse),
            "ModelReady": (self.model_ready, False, pb.ModelReadyRequest, pb.ModelReadyResponse),
            "ServerMetadata": (self.server_metadata, False, pb.ServerMetadataRequest, pb.ServerMetadataResponse),
            "ModelMetadata": (self.model_metadata, False, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
            "ModelInfer": (self.model_infer, True, pb.ModelInferRequest, pb.ModelInferResponse),
            "RepositoryIndex": (repository.index, True, pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
            "RepositoryModelLoad": (
                repository.load, True, pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse
            ),
            "RepositoryModelUnload": (
                repository.unload, True, pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse
            ),
        }  # fmt: skip
        return {
            name: Served(self.handler(name, method, admitted), request, response)
            for name, (method, admitted, request, response) in methods.items()
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

    def handler(self, name: str, method: Method, admitted: bool) -> Method:
        """``method`` behind the key check, the door (when ``admitted``), the metrics and the
        error boundary: its call's envelope (rpc_call.RpcCall) is the method's context."""
        path = REST_TWIN.get(name)
        activity, metrics, observer = self.activity, self.metrics, self.observer

        async def handle(request: Any, context: Any) -> Any:
            call = RpcCall(activity, metrics, time.perf_counter(), name, request, context, observer)
            code = "OK"
            try:
                self._authorize(path, context)
                if admitted:
                    call.admit()
                response = call.response = await method(request, call)
                return response
            except asyncio.CancelledError:  # the caller went away or its deadline passed
                call.disconnected = True
                raise
            except Exception as exc:  # noqa: BLE001 -- every error becomes a status here (_failure logs a bug)
                code, status = self._failure(name, exc)
                await context.abort_with_status(status)
            finally:
                call.finish(code)
                if call.closes and not self.host.draining:
                    # Retired (service/processes/retiring_server.py): the front end's stop has
                    # begun sending GOAWAY, from gRPC's own threads. This answer waits for it: a
                    # client that reads its answer first sends its next call on this connection,
                    # which the stop then closes with that call unread (a reset, and the GOAWAY
                    # lost with it) instead of moving the call to a process serving the new set.
                    await asyncio.sleep(GOAWAY_SECONDS)

        return handle

    def _authorize(self, path: str | None, context: Any) -> None:
        """Refused (UNAUTHENTICATED) unless the key rule admits a call for ``path`` (its exempt
        REST twin; None: it has none) with its context's metadata: both ways in check here."""
        auth = self.auth
        if auth is not None and not auth.admits(path, context.invocation_metadata() or ()):
            self.metrics.observe_error("auth")
            raise Refused(UNAUTHENTICATED)

    def _failure(self, name: str, exc: Exception) -> tuple[str, grpc.Status]:
        """The error's status, and its code's name for the metrics: the one mapping of both ways in."""
        if isinstance(exc, Refused):
            answer = exc.answer
        else:
            found = answer_for(exc, self.metrics)
            if found is None:
                log.exception("unhandled error in gRPC %s", name)
                self.metrics.observe_error("internal")
                found = ErrorAnswer(500, "internal server error; the server log has the details")
            answer = found
        return code_of(answer).name, status_of(answer)

    def infer_now(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse | None:
        """ModelInfer without a coroutine, for a model that runs inline (the native front end
        calls it from its batch of calls, as HTTP's lane calls the door): the same key check,
        door, request id, metrics and statuses as ``methods()``'s, raising ``Aborted``. None,
        with nothing done, when the call must go the wrapped way: its model is not inline (or
        not found: the wrapped way checks the key first), telemetry is on, or the process is
        draining or retiring (the wrapper's wait for GOAWAY)."""
        if self.observer is not None or self.activity.closing:
            return None
        try:
            served = self.door.resolve(request.model_name, request.model_version or None)
        except Exception:  # noqa: BLE001 -- answered the wrapped way, after the key check
            return None
        if not served.model.inline:
            return None
        started = time.perf_counter()
        call = RpcCall(self.activity, self.metrics, started, "ModelInfer", request, context, None)
        code = "OK"
        try:
            self._authorize(None, context)
            call.admit()
            rid = call.identify_caller(self._ids)
            decoded = tensors.decode(request, served.expected())
            response, call.inference = self.door.infer_inline(
                served, decoded.inputs, _encode, (request.id, decoded.outputs), received=started,
                parsed=time.perf_counter(), rid=rid, timeout_ms=decoded.timeout_ms,
                remaining=context.time_remaining(), priority=decoded.priority,
            )  # fmt: skip
            return response
        except Exception as exc:  # noqa: BLE001 -- every error becomes a status, as in the wrapper
            code, status = self._failure("ModelInfer", exc)
            raise Aborted(status) from None
        finally:
            call.finish(code)

    # Readiness and metadata are the front door's answers (as REST's v2 routes give them).
    async def server_live(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.door.live)

    async def server_ready(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.door.ready)

    async def model_ready(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        # As REST's /v2/models/{name}[/versions/{v}]/ready: an unknown model is NOT_FOUND.
        try:
            found = self.door.model_ready(request.name, request.version or None)
        except NotReady:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=found.ready)

    async def server_metadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="inferpool", version=self.version)

    async def model_metadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        found = self.door.model_metadata(request.name, request.version or None)
        response = pb.ModelMetadataResponse(name=found["name"], versions=found["versions"], platform=found["platform"])
        for field in ("inputs", "outputs"):
            for tensor in found[field]:
                getattr(response, field).add(name=tensor["name"], datatype=tensor["datatype"], shape=tensor["shape"])
        return response

    async def model_infer(self, request: pb.ModelInferRequest, call: RpcCall) -> pb.ModelInferResponse:
        received = time.perf_counter()
        rid = call.identify_caller(self._ids)
        door = self.door
        served = door.resolve(request.model_name, request.model_version or None)
        decoded = tensors.decode(request, served.expected())
        response, call.inference = await door.infer(
            served, decoded.inputs, _encode, (request.id, decoded.outputs), received=received,
            parsed=time.perf_counter(), rid=rid, timeout_ms=decoded.timeout_ms, remaining=call.time_remaining(),
            priority=decoded.priority,
        )  # fmt: skip
        return response


def _encode(served: frontdoor.Served, outputs: Mapping[str, Any], asked: tuple[str, Any]) -> pb.ModelInferResponse:
    return tensors.encode(served.name, served.version, asked[0], outputs, asked[1])
