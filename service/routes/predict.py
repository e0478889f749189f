"""POST /predict: tensors in, tensors out, for the served model."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from service.codec import decode_inputs, encode_json, read_body
from service.deps import host_of, metrics_of
from service.metrics import Inference
from service.middleware import INFERENCE, STARTED
from service.openapi import PREDICT_REQUEST, PREDICT_RESPONSES

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
    # The hot path reads app state directly: FastAPI's dependency solving measured ~20% of
    # this route's own CPU time, more than the model's input validation.
    host, metrics = host_of(request), metrics_of(request)
    model = host.get()
    received = time.perf_counter()
    inputs = decode_inputs(await read_body(request, host.settings.max_body_bytes))
    parsed = time.perf_counter()
    prediction = await model.infer(inputs)
    encoding = time.perf_counter()
    body = encode_json({"model": model.name, "outputs": prediction.outputs})
    encoded = time.perf_counter()
    inference = Inference(
        model=model.name,
        decode_seconds=parsed - received + prediction.validate_seconds,
        queue_seconds=prediction.queue_seconds,
        compute_seconds=prediction.compute_seconds,
        encode_seconds=encoded - encoding,
        batch_size=prediction.batch_size,
    )
    request.scope[INFERENCE] = inference
    metrics.observe_inference(inference)
    metrics.refresh(model)
    timing = inference.server_timing(encoded - request.scope.get(STARTED, received))
    return Response(body, media_type="application/json", headers={"Server-Timing": timing})
