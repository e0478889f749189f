"""One request's phase timings: into the metrics, the ``Server-Timing`` header and the scope
(where the middleware picks up inference time to compute the server's own overhead)."""

from __future__ import annotations

from fastapi import Request

from engine import Prediction
from service.metrics import Inference, Metrics
from service.middleware import INFERENCE, STARTED


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
    )
    request.scope[INFERENCE] = inference
    metrics.observe_inference(inference)
    return {"Server-Timing": inference.server_timing(encoded - request.scope.get(STARTED, received))}
