"""One request's deadline and phase timings: the timings go into the metrics, the
``Server-Timing`` header and the scope (where the middleware picks up inference time to
compute the server's own overhead)."""

from __future__ import annotations

import math
import re
import time

from starlette.types import Scope

from inferpool.engine import Prediction
from inferpool.service.apierror import ApiError
from inferpool.service.metrics import Inference, Metrics
from inferpool.service.middleware import STARTED
from inferpool.service.observe import INFERENCE

TIMEOUT_HEADER = b"x-request-timeout-ms"
# A JSON number without a sign, in ASCII: float() alone would also take " 5", "+5", "1_000",
# "nan" and non-ASCII digits, none of which a client means as a timeout.
_TIMEOUT_SYNTAX = re.compile(rb"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def deadline(header: bytes | None, default_ms: float, override_ms: float | None = None) -> float | None:
    """Absolute ``time.monotonic()`` deadline: the request's own timeout (the v2 parameter,
    else the X-Request-Timeout-Ms header), else the default."""
    given: object
    if override_ms is not None:
        given, what, ms = override_ms, "request timeout", override_ms
    elif header is not None:
        given, what = header.decode("latin-1"), "X-Request-Timeout-Ms"
        ms = float(header) if _TIMEOUT_SYNTAX.fullmatch(header) else math.nan
    else:
        return time.monotonic() + default_ms / 1e3 if default_ms else None
    if not ms > 0 or math.isinf(ms):
        message = f"{what} {given!r} must be a positive number of milliseconds, like 250 or 0.5"
        raise ApiError(400, message, "invalid_input")
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
        marks=(received, parsed, encoding, prediction.dispatched),
    )
    scope[INFERENCE] = inference
    metrics.observe_inference(inference)
    return inference.server_timing(encoded - scope.get(STARTED, received))
