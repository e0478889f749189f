"""One request per hot route, answered inside the process before it says it is ready.

A serving process forked by the supervisor inherits the parent's loaded models, but its first
request still paid for what no request had touched in it yet (code and data pages first used
after the fork, the engine's first call in this process, the first v2 request's table of
expected inputs): on the digits model its decode took 0.69 ms against 0.11 ms later, its model
call 0.77 ms against 0.31 ms. So the host runs these before its READY mark
(service/models/host.py), through the routes' own raw handlers. (The other millisecond the
first request paid, its metrics slots, is Metrics.model_ready's.)

They are not requests: they go to the handlers directly, past RequestContext (no request
metrics, access log, trace or door count), through a door whose metrics are a stand-in
(no inference metrics either). The handlers' own code, the codec and the model call are the
real ones, so their pages and caches are warm for the first real request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import orjson
from starlette.types import ASGIApp, Message, Scope

from inferpool.engine.client import EngineClient
from inferpool.service.frontdoor import Activity, FrontDoor
from inferpool.service.http.openapi_schemas import v2_sample, zeros
from inferpool.service.priorities import Priorities
from inferpool.service.telemetry.metrics import Inference, Labels, Metrics

if TYPE_CHECKING:  # the host loads models (torch); warming only asks it which it serves
    from inferpool.service.models.host import ModelHost

log = logging.getLogger(__name__)
WARM_TIMEOUT_SECONDS = 30.0
"""How long the loader thread waits for the warm requests (a model call each, on the event loop)."""


class Uncounted:
    """What the warm door calls instead of Metrics: a second Metrics would not do, as with
    PROMETHEUS_MULTIPROC_DIR every Metrics of the process writes the same files."""

    def observe_inference(self, inference: Inference) -> None:
        pass

    def refresh(self, model: EngineClient, labels: Labels, *, force: bool = False) -> None:
        pass

    def observe_error(self, reason: str) -> None:
        pass


def uncounted_door(door: FrontDoor) -> FrontDoor:
    """``door``'s twin for warm requests: the same host and served records (so the first v2
    request's expected inputs are already built), its own count, no metrics, no response cache
    (a warm request must reach the model) and no priorities."""
    twin = FrontDoor(door.host, cast(Metrics, Uncounted()), Activity())
    twin._served = door._served  # the door's own records, shared on purpose
    twin.cache_look = None
    twin.priorities = Priorities()
    return twin


def predict_body(model: EngineClient) -> bytes | None:
    """``/predict``'s body for one sample of zeros; None for a model whose handler takes its own
    input (its v2 request warms it)."""
    if model.info.handler is not None:
        return None
    inputs = model.schema.inputs
    sample = {s.name: zeros(s.sample_shape, False if s.dtype == "bool" else 0) for s in inputs}
    return orjson.dumps({"inputs": sample[inputs[0].name] if len(inputs) == 1 else sample})


def v2_body(model: EngineClient) -> bytes:
    """A v2 infer body of one sample, as /docs' example."""
    return orjson.dumps(v2_sample(model.name, model.schema, model.info.handler))


async def answer(handler: ASGIApp, path: str, params: Mapping[str, Any], body: bytes) -> int:
    """``handler``'s status for one in-process POST of ``body`` (nothing is sent anywhere)."""
    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
        "client": None, "server": None, "path_params": dict(params),
    }  # fmt: skip
    status = 0

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await handler(scope, receive, send)
    return status


def learns_nothing(model: EngineClient) -> bool:
    """Whether a warm request leaves ``model`` as it found it. A batched model's does not: a lone
    request is a wait that found no company, and its batcher's patience (engine/executors/patience.py)
    counts it, so warm requests would make the first real burst's batches smaller."""
    return model.info.dispatch != "batch"


async def warm(predict: ASGIApp, infer: ASGIApp, models: list[EngineClient], default: EngineClient) -> None:
    """One ``/predict`` (the default model's) and one v2 infer per model; a warm request that
    fails is logged and skipped: it only costs the first real request its speed."""
    calls: list[tuple[ASGIApp, str, dict[str, Any], bytes | None]] = []
    if learns_nothing(default):
        calls.append((predict, "/predict", {}, predict_body(default)))
    for model in filter(learns_nothing, models):
        calls.append((infer, f"/v2/models/{model.name}/infer", {"name": model.name}, v2_body(model)))
    started = time.perf_counter()
    sent = [(path, await answer(handler, path, params, body)) for handler, path, params, body in calls if body]
    for path, status in sent:
        if status != 200:
            log.warning("warm request to %s answered %d; the first real request there is a cold one", path, status)
    log.info("warm requests answered: %d in %.1f ms", len(sent), (time.perf_counter() - started) * 1e3)


def warm_on(loop: asyncio.AbstractEventLoop, predict: ASGIApp, infer: ASGIApp, host: ModelHost) -> Callable[[], None]:
    """The host's ``warm`` hook: the loader thread runs the warm requests on the event loop the
    real ones will run on (an executor's futures belong to it) and waits for them."""

    def run() -> None:
        default = host.default
        assert default is not None, "warmed once the models serve"
        requests = warm(predict, infer, list(host.models.values()), default)
        asyncio.run_coroutine_threadsafe(requests, loop).result(WARM_TIMEOUT_SECONDS)

    return run
