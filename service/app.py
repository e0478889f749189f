"""The FastAPI application: wiring only; behaviour lives in routes, codec and errors."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from inferpool.engine.client import EngineClient
from inferpool.service.auth import ApiKey, ApiKeyAuth
from inferpool.service.errors import install_error_handlers
from inferpool.service.frontdoor import Activity, FrontDoor, Served
from inferpool.service.grpc.server import front_end
from inferpool.service.http.fastpath import InferPoolApp
from inferpool.service.http.lane import Lane
from inferpool.service.http.lane_routes import lane_routes
from inferpool.service.http.middleware import RequestContext
from inferpool.service.http.openapi import model_aware_openapi
from inferpool.service.http.routes import health, openai, predict, repository, text, v2
from inferpool.service.http.text_route import TextRoute, text_lane
from inferpool.service.http.warmup import uncounted_door, warm_on
from inferpool.service.processes.supervisor_channel import announce_after
from inferpool.service.telemetry.metrics import Metrics
from inferpool.service.telemetry.observe import Observer

if TYPE_CHECKING:  # config imports the engine's backends, hence torch; the app only reads it
    from inferpool.config import Settings
    from inferpool.service.models.host import ModelHost

log = logging.getLogger(__name__)
GRPC_GRACE_SECONDS = 1.0
"""For gRPC calls that came in after the drain's wait (they are refused UNAVAILABLE at once)."""


def _version() -> str:
    try:
        return version("inferpool")
    except PackageNotFoundError:
        return "0+unknown"


def _announce(served: Served, metrics: Metrics, version: str) -> None:
    model, model_version = served.model, served.labels[1]
    metrics.model_ready(model, version, served.labels)
    labels = {**model.info.labels(), "version": model_version} if model_version else model.info.labels()
    log.info("serving %s", " ".join(f"{k}={v}" for k, v in labels.items()))


def create_app(settings: Settings, host: ModelHost | None = None) -> FastAPI:
    """The app; ``host`` is one the supervisor already loaded (inferpool.service.processes.supervisor)."""
    metrics = Metrics.for_settings(settings)
    version = _version()
    activity = Activity()
    observer = Observer.for_settings(settings, metrics.registry)

    supervised = host is not None
    if host is None:
        from inferpool.service.models.host import ModelHost  # loads models: torch, at start-up, not at import

        host = ModelHost(settings)

    door = FrontDoor(host, metrics, activity)

    def ready(model: EngineClient) -> None:
        activity.admit(model.info.capacity)
        _announce(door.add(model), metrics, version)

    host.on_ready = ready

    @asynccontextmanager
    async def lifespan(app: InferPoolApp) -> AsyncIterator[None]:
        # A short switch interval lets a worker thread take the GIL back from the event loop
        # soon after its torch op ends, instead of after CPython's default 5 ms.
        sys.setswitchinterval(settings.switch_interval)
        if not supervised:  # the supervisor logged it once for all its processes
            log.info("effective config: %s", settings.model_dump_json())
        listening = None
        if settings.grpc_port and host.announce is not None:
            listening = host.announce = announce_after(host.announce, 2)
        app.build_fast_path()  # the middleware list is final now, and no request should build it
        uncounted = uncounted_door(door)
        host.warm = warm_on(asyncio.get_running_loop(), predict.Predict(uncounted), v2.Infer(uncounted), host)
        host.start()  # loads (or starts) and warms in the background; /health/ready says when done
        if observer is not None:  # here, not in create_app: its threads must be this process's
            observer.start()
        grpc = None
        if settings.grpc_port:
            # The supervisor sets app.state.control after create_app, before the server starts.
            control = getattr(app.state, "control", None)
            grpc = front_end(settings, door, version, control, observer)
            await grpc.start()
            if listening is not None:
                listening()
        try:
            yield
        finally:
            if grpc is not None:  # after the HTTP drain, which waited for gRPC calls too (Activity)
                await grpc.stop(GRPC_GRACE_SECONDS)
            host.close()
            if observer is not None:  # last: the spans and records of the drained requests go out
                observer.stop()

    app = InferPoolApp(
        title="InferPool",
        version=version,
        description="Fast PyTorch model serving on CPUs.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.host = host
    app.state.metrics = metrics
    app.state.door = door
    # The hot routes' raw handlers, by the endpoint that documents each (service/http/fastpath.py).
    answer_predict, answer_infer = predict.Predict(door), v2.Infer(door)
    hot_handlers = app.state.hot_handlers = {
        predict.predict: answer_predict,
        predict.predict_named: answer_predict,
        v2.infer: answer_infer,
        openai.embeddings: TextRoute(door, openai.EMBEDDINGS),
        **text.raw_handlers(door),
    }
    app.state.hot_routers = [predict.router, v2.router, openai.router, text.router]
    if observer is None:
        key = settings.api_key
        auth = None if key is None else ApiKey(key.get_secret_value(), settings.auth_exempt)
        routes = lane_routes(answer_predict, answer_infer, text_lane(hot_handlers, [openai.router, text.router]))
        app.lane = Lane(routes, activity, metrics, settings.max_body_bytes, auth, bool(settings.cors_origins))
    app.include_router(predict.router)
    app.include_router(health.router)
    app.include_router(v2.router)
    app.include_router(openai.router)
    app.include_router(text.router)
    app.include_router(repository.router)
    install_error_handlers(app, metrics)
    if settings.api_key is not None:
        exempt = frozenset(settings.auth_exempt)
        app.add_middleware(ApiKeyAuth, key=settings.api_key.get_secret_value(), exempt=exempt, metrics=metrics)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"])
    app.state.activity = activity
    metrics.watch_door(lambda: (activity.active, activity.limit, door.cache_bytes))
    app.add_middleware(RequestContext, metrics=metrics, activity=activity, observer=observer)
    app.openapi = model_aware_openapi(  # type: ignore[method-assign]
        app,
        lambda: host.default.schema if host.default else None,
        lambda: host.default.info.handler if host.default else None,
        lambda path: settings.api_key is not None and path not in settings.auth_exempt,
    )
    return app
