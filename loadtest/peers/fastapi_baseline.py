"""The fair FastAPI baseline: what a user would write to serve the digits CNN without InferPool.

    python -m loadtest.peers.fastapi_baseline --port 8001 [--workers 2]

Same model and weights (``inferpool.engine.zoo.digits:build``), a plain ``def`` endpoint (FastAPI runs it
in its threadpool, so the event loop never blocks) calling the model under
``torch.inference_mode()``, a pydantic body, an orjson response, ``torch.set_num_threads(1)``,
uvicorn with uvloop + httptools, one process (``--workers N``: uvicorn's own N processes,
each loading its own model). Same request and response shape as InferPool's
``POST /predict`` for one sample or a batch.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
import torch
import uvicorn
from fastapi import FastAPI, Response
from pydantic import BaseModel

from inferpool.engine.zoo.digits import build

torch.set_num_threads(1)
MODEL = build().module.eval()
app = FastAPI()


class PredictRequest(BaseModel):
    inputs: list[Any]


@app.get("/health/ready")
def ready() -> dict[str, str]:
    return {"status": "ready"}


@app.post("/predict")
def predict(request: PredictRequest) -> Response:
    x = torch.tensor(request.inputs, dtype=torch.float32)
    single = x.dim() == 3
    with torch.inference_mode():
        probabilities, label = MODEL(x.unsqueeze(0) if single else x)
    if single:
        outputs = {"probabilities": probabilities[0].tolist(), "label": int(label[0])}
    else:
        outputs = {"probabilities": probabilities.tolist(), "label": label.tolist()}
    # orjson directly (FastAPI's ORJSONResponse is deprecated; this is what it did).
    return Response(orjson.dumps({"model": "digits", "outputs": outputs}), media_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    target = "loadtest.peers.fastapi_baseline:app" if args.workers > 1 else app  # workers need an import string
    uvicorn.run(target, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", workers=args.workers,
                log_level="warning", access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()
