"""The plain FastAPI server a user writes for the other reference workloads, at any setting.

    python -m loadtest.peers.fastapi_models --workload resnet50|minilm --port 8001 [--workers 2] [--threads 2]

Same weights as InferPool's servers, the same requests and answers (loadtest.workloads):

- ``resnet50``: ``loadtest.resnet:build`` in torch eager, v2 infer with binary tensors at
  ``POST /v2/models/resnet50/infer`` (the JSON header, then the image's raw float32 bytes; the
  answer the same way), as Triton's client and InferPool's binary route speak it.
- ``minilm``: sentence-transformers on the bundled all-MiniLM-L6-v2 (``inferpool.engine.zoo.minilm``,
  offline), ``POST /predict`` with ``{"inputs": "text" | ["text", ...]}``, normalised embeddings back.

A plain ``def`` endpoint (FastAPI runs it in its thread pool), ``torch.set_num_threads(--threads)``,
uvicorn with uvloop and httptools, ``--workers N`` of uvicorn's own processes, each loading its
own model: the settings a user would try, which ``loadtest.compare --workload`` runs side by side.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import orjson
import torch
import uvicorn
from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

HEADER_LENGTH = "inference-header-content-length"
app = FastAPI()


def _route_resnet50() -> None:
    from loadtest.resnet import build

    model = build().module.eval()

    @app.post("/v2/models/resnet50/infer")
    async def infer(request: Request) -> Response:
        body = await request.body()
        length = int(request.headers[HEADER_LENGTH])
        header = orjson.loads(body[:length])
        shape = header["inputs"][0]["shape"]
        image = torch.from_numpy(np.frombuffer(bytearray(body[length:]), dtype=np.float32).reshape(shape))
        return await run_in_threadpool(_resnet_answer, model, image)


def _resnet_answer(model: torch.nn.Module, image: torch.Tensor) -> Response:
    with torch.inference_mode():
        probabilities = model(image)
    raw = probabilities.numpy().tobytes()
    header = orjson.dumps({
        "model_name": "resnet50",
        "outputs": [{
            "name": "probabilities", "datatype": "FP32", "shape": list(probabilities.shape),
            "parameters": {"binary_data_size": len(raw)},
        }],
    })  # fmt: skip
    return Response(header + raw, media_type="application/octet-stream", headers={HEADER_LENGTH: str(len(header))})


def _route_minilm() -> None:
    from sentence_transformers import SentenceTransformer

    from inferpool.engine.zoo.minilm import model_dir

    model = SentenceTransformer(str(model_dir()), device="cpu")

    @app.post("/predict")
    def predict(body: dict[str, Any]) -> Response:
        texts = body["inputs"]
        single = isinstance(texts, str)
        with torch.inference_mode():
            vectors = model.encode([texts] if single else texts, batch_size=64, normalize_embeddings=True)
        embedding = vectors[0] if single else vectors
        answer = {"model": "minilm", "outputs": {"embedding": embedding}}
        return Response(orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


@app.get("/health/ready")
def ready() -> dict[str, str]:
    return {"status": "ready"}


ROUTES = {"resnet50": _route_resnet50, "minilm": _route_minilm}


def _configure() -> None:
    torch.set_num_threads(int(os.environ.get("PEER_THREADS", "1")))
    ROUTES[os.environ.get("PEER_WORKLOAD", "resnet50")]()


if os.environ.get("PEER_WORKLOAD"):  # each of uvicorn's worker processes imports this module anew
    _configure()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=sorted(ROUTES), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    args = parser.parse_args()
    os.environ["PEER_WORKLOAD"], os.environ["PEER_THREADS"] = args.workload, str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    uvicorn.run("loadtest.peers.fastapi_models:app", host="127.0.0.1", port=args.port, loop="uvloop",
                http="httptools", workers=args.workers, log_level="warning", access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()
