"""One request's deadline and phase timings: the timings go into the metrics, the
``Server-Timing`` header and the scope (where the middleware picks up inference time to
compute the server's own overhead)."""

from __future__ import annotations

import math
import time

from fastapi import Request

from engine import Prediction
from service.apierror import ApiError
from service.metrics import Inference, Metrics
from service.middleware import INFERENCE, STARTED

TIMEOUT_HEADER = "x-request-timeout-ms"


def deadline(request: Request, default_ms: float, override_ms: object = None) -> float | None:
    """Absolute ``time.monotonic()`` deadline: the request's own timeout, else the default."""
    given = override_ms if override_ms is not None else request.headers.get(TIMEOUT_HEADER)
    if given is None:
        return time.monotonic() + default_ms / 1e3 if default_ms else None
    try:
        ms = float(given)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        ms = math.nan
    if not ms > 0 or math.isinf(ms):
        raise ApiError(400, f"request timeout {given!r} must be a positive number of milliseconds", "invalid_input")
    return time.monotonic() + ms / 1e3


def record(
    request: Request,
    metrics: Metrics,
    model: str,
    prediction: Prediction,
    *,
    received: float,
    parsed: float,
    encoding: float,
    encoded: float,
) -> dict[str, str]:
    """Observe the phases; returns the response headers that report them."""
    inference = Inference(
        model=model,
        decode_seconds=parsed - received + prediction.validate_seconds,
        queue_seconds=prediction.queue_seconds,
        compute_seconds=prediction.compute_seconds,
        encode_seconds=encoded - encoding,
        batch_size=prediction.batch_size,
        batch_seconds=prediction.batch_seconds,
    )
    request.scope[INFERENCE] = inference
    metrics.observe_inference(inference)
    return {"Server-Timing": inference.server_timing(encoded - request.scope.get(STARTED, received))}
