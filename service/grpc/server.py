"""The gRPC front ends by name (GRPC_SERVERS; ``grpc_server`` picks one: config/grpc.py), and
the grpcio one: grpcio's asyncio server on the serving process's own event loop (uvicorn's),
beside HTTP, with the v2 service and the standard health service. The native one is
service/grpc/native.py.

Every serving process listens on ``grpc_port`` with SO_REUSEPORT (grpcio's default on Linux):
the kernel spreads new connections over the processes, as the shared HTTP socket does. grpcio
cannot serve a socket it did not open, so the supervisor only holds the port (bound, not
listening) to refuse a second server on it at start-up (service/processes/supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from inferpool.service.auth import ApiKey
from inferpool.service.frontdoor import FrontDoor
from inferpool.service.grpc.native import NativeFrontEnd
from inferpool.service.grpc.servicer import SERVICE, Servicer
from inferpool.service.processes.supervisor_channel import Control
from inferpool.service.telemetry.observe import Observer

if TYPE_CHECKING:  # config imports the engine's backends (torch); this only reads it
    from inferpool.config import Settings
    from inferpool.service.models.host import ModelHost

log = logging.getLogger(__name__)
HEALTH_POLL_SECONDS = 0.25
"""How often the health service's watchers get the host's readiness (Watch lags it by this;
Check reads it live)."""
SERVICES = ("", SERVICE)  # the whole server, and the v2 service by name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class FrontEnd(Protocol):
    """A gRPC server serving a servicer's methods and the health service on ``bind``."""

    def __init__(self, servicer: Servicer, host: ModelHost, bind: str, max_message_bytes: int) -> None: ...
    async def start(self) -> None: ...
    def retire(self, grace: float) -> None: ...
    async def stop(self, grace: float) -> None: ...


def front_end(
    settings: Settings, door: FrontDoor, version: str, control: Control | None = None,
    observer: Observer | None = None,
) -> FrontEnd:  # fmt: skip
    """``control``: the process's channel to the supervisor, for the repository methods (None
    without a repository, or outside a supervisor)."""
    key = settings.api_key
    auth = None if key is None else ApiKey(key.get_secret_value(), settings.auth_exempt)
    from inferpool.config.grpc import grpc_server_for  # the config package imports torch: not at import

    servicer = Servicer(door, version=version, auth=auth, control=control, observer=observer)
    server = GRPC_SERVERS[grpc_server_for(settings.grpc_server, settings.model_control_mode)]
    front = server(servicer, door.host, address(settings.host, settings.grpc_port), settings.max_body_bytes)
    if control is not None:  # a repository's process: a model change replaces it
        control.retire_hooks.append(partial(front.retire, settings.drain_seconds))
    return front


class GrpcFrontEnd:
    def __init__(self, servicer: Servicer, host: ModelHost, bind: str, max_message_bytes: int) -> None:
        self.servicer = servicer
        self.host = host
        self.bind = bind
        self.max_message_bytes = max_message_bytes
        self.health = Health(host)
        self._server: grpc.aio.Server | None = None
        self._poller: asyncio.Task[None] | None = None
        self._retiring: asyncio.Future[None] | None = None

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                # A larger message is refused by gRPC itself with RESOURCE_EXHAUSTED, before it is
                # buffered whole: the counterpart of max_body_bytes' 413.
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 1),
            ]
        )
        server.add_generic_rpc_handlers((self.servicer.handlers(),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        server.add_insecure_port(self.bind)  # raises RuntimeError when it cannot bind
        await self._copy_health()
        await server.start()
        self._server = server
        self._poller = asyncio.create_task(self._follow_health())
        log.info("gRPC (v2 inference and health) listening on %s", self.bind)

    def retire(self, grace: float) -> None:
        """This process is replaced by a newer one: take no new calls (the clients reconnect, to
        the new processes), and give those running ``grace`` seconds."""
        if self._server is not None and self._retiring is None:
            log.info("gRPC: replaced by a newer serving process, taking no new calls")
            self._retiring = asyncio.ensure_future(self._server.stop(grace))

    async def stop(self, grace: float) -> None:
        """Refuse new calls, give those running ``grace`` seconds, then close."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)

    async def _follow_health(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_POLL_SECONDS)
            await self._copy_health()

    async def _copy_health(self) -> None:
        status = SERVING if self.host.status.ready else NOT_SERVING
        for service in SERVICES:
            await self.health.set(service, status)


class Health(health_aio.HealthServicer):
    """grpc.health.v1 with Check answered from the host's readiness at the time of the call, as
    /health/ready is (a probe right after readiness must not see the poller's lag)."""

    def __init__(self, host: ModelHost) -> None:
        super().__init__()
        self.host = host

    async def Check(  # the generated servicer's name
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in SERVICES:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no service {request.service!r} here")
        return health_pb2.HealthCheckResponse(status=SERVING if self.host.status.ready else NOT_SERVING)


GRPC_SERVERS: dict[str, type[FrontEnd]] = {"native": NativeFrontEnd, "grpcio": GrpcFrontEnd}
"""The gRPC front ends by the name ``grpc_server`` gives (config/settings.py: GRPC_SERVER_NAMES)."""
