"""POST /predict: tensors in, tensors out, for the served model."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from service.codec import decode_inputs, encode_json, read_body
from service.deps import host_of, metrics_of
from service.errors import documented_error
from service.openapi import PREDICT_REQUEST, PREDICT_RESPONSES
from service.timing import deadline, record

router = APIRouter()


@router.post(
    "/predict",
    summary="Run the model on one sample or a batch",
    openapi_extra={"requestBody": PREDICT_REQUEST},
    responses=PREDICT_RESPONSES,
)
async def predict(request: Request) -> Response:
    """Send `{"inputs": x}` where `x` is one sample or a batch (leading batch dimension) for
    a single-input model, or an object keyed by input name. One sample in gives one sample
    out; a batch in gives the batch out. Inference runs on a worker thread, never on the
    event loop. The `Server-Timing` header gives each phase in milliseconds."""
    return await _predict(request, None)


@router.post(
    "/predict/{name}",
    summary="Run a named model on one sample or a batch",
    openapi_extra={"requestBody": PREDICT_REQUEST},
    responses=PREDICT_RESPONSES | {404: documented_error("No model of that name is served.")},
)
async def predict_named(request: Request, name: str) -> Response:
    """As `/predict`, for one of the models listed in the config's `[[models]]`."""
    return await _predict(request, name)


async def _predict(request: Request, name: str | None) -> Response:
    # The hot path reads app state directly: FastAPI's dependency solving measured ~20% of
    # this route's own CPU time, more than the model's input validation.
    host, metrics = host_of(request), metrics_of(request)
    model = host.get(name)
    received = time.perf_counter()
    inputs = decode_inputs(await read_body(request, host.settings.max_body_bytes))
    parsed = time.perf_counter()
    prediction = await model.infer(inputs, deadline(request, host.settings.request_timeout_ms))
    encoding = time.perf_counter()
    body = encode_json({"model": model.name, "outputs": prediction.outputs})
    headers = record(
        request, metrics, model.name, prediction,
        received=received, parsed=parsed, encoding=encoding, encoded=time.perf_counter(),
    )  # fmt: skip
    metrics.refresh(model)
    return Response(body, media_type="application/json", headers=headers)
