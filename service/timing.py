"""One request's deadline and phase timings: the timings go into the metrics, the
``Server-Timing`` header and the scope (where the middleware picks up inference time to
compute the server's own overhead)."""

from __future__ import annotations

import math
import time

from starlette.types import Scope

from engine import Prediction
from service.apierror import ApiError
from service.metrics import Inference, Metrics
from service.middleware import INFERENCE, STARTED

TIMEOUT_HEADER = b"x-request-timeout-ms"


def deadline(header: bytes | None, default_ms: float, override_ms: object = None) -> float | None:
    """Absolute ``time.monotonic()`` deadline: the request's own timeout (the v2 parameter,
    else the X-Request-Timeout-Ms header), else the default."""
    given = override_ms if override_ms is not None else (None if header is None else header.decode("latin-1"))
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
    scope: Scope,
    metrics: Metrics,
    model: str,
    prediction: Prediction,
    *,
    received: float,
    parsed: float,
    encoding: float,
    encoded: float,
) -> str:
    """Observe the phases; returns the ``Server-Timing`` header that reports them."""
    inference = Inference(
        model=model,
        decode_seconds=parsed - received + prediction.validate_seconds,
        queue_seconds=prediction.queue_seconds,
        compute_seconds=prediction.compute_seconds,
        encode_seconds=encoded - encoding,
        batch_size=prediction.batch_size,
        batch_seconds=prediction.batch_seconds,
    )
    scope[INFERENCE] = inference
    metrics.observe_inference(inference)
    return inference.server_timing(encoded - scope.get(STARTED, received))
