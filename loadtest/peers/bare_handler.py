"""The limit row of ``loadtest.compare`` (issue 32): the least a server can do to answer
``POST /predict`` on the digits CNN.

    python -m loadtest.peers.bare_handler --port 8001 [--workers 2]

One ASGI function under uvicorn (uvloop + httptools, no access log, no lifespan), ``orjson`` in
and out, the reference digits CNN through onnxruntime called inline on one intra-op thread, in
``--workers`` processes (uvicorn's own; 2 by default, as InferPool's no-flag server on two
cores). The ONNX file is InferPool's own export of ``inferpool.engine.zoo.digits:build`` (same
weights, same exporter, from the export cache: the parent exports it once if it is not there)
and the session has the serving options of ``engine/backends/onnxruntime/runtime.py``, so the model call
is the one InferPool's no-flag path makes. The workers import neither torch nor InferPool: they
read the file named by ``INFERPOOL_BARE_ONNX``. Same request and response JSON as ``/predict``
for one sample or a batch; any GET answers 200 (the launcher's readiness probe). Nothing else:
no routing, validation, errors as JSON, request ids, metrics, admission or timing headers.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import uvicorn

from loadtest.peers.onnx_session import session

ONNX_ENV = "INFERPOOL_BARE_ONNX"
MODEL = "inferpool.engine.zoo.digits:build"
JSON_HEADERS = [(b"content-type", b"application/json")]
READY = b'{"status":"ready"}'
SAMPLE_NDIM = 3  # one [1, 8, 8] image; a batch has four dimensions


def predictor(path: str) -> Callable[[object], dict[str, Any]]:
    """The model call: a sample or a batch as nested lists in, the outputs out."""
    model = session(path)
    input_name = model.get_inputs()[0].name
    output_names = [out.name for out in model.get_outputs()]

    def predict(inputs: object) -> dict[str, Any]:
        array = np.asarray(inputs, dtype=np.float32)
        single = array.ndim == SAMPLE_NDIM
        probabilities, label = model.run(output_names, {input_name: array[None] if single else array})
        if single:
            return {"probabilities": probabilities[0], "label": int(label[0])}
        return {"probabilities": probabilities, "label": label}

    return predict


def make_app(path: str) -> Any:
    predict = predictor(path)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = READY
        if scope["method"] == "POST":
            message = await receive()
            request = message.get("body", b"")
            while message.get("more_body", False):  # one message for a small body: no join
                message = await receive()
                request += message.get("body", b"")
            outputs = predict(orjson.loads(request)["inputs"])
            body = orjson.dumps({"model": "digits", "outputs": outputs}, option=orjson.OPT_SERIALIZE_NUMPY)
        headers = [*JSON_HEADERS, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def __getattr__(name: str) -> Any:
    # ``app`` for uvicorn's import string, built in each worker on first lookup (the parent,
    # which only exports, never builds a session).
    if name == "app":
        app = globals()["app"] = make_app(os.environ[ONNX_ENV])
        return app
    raise AttributeError(name)


def export() -> str:
    """The path of InferPool's cached ONNX export of the digits CNN (exported now if absent)."""
    from inferpool.engine.backends.onnxruntime.runtime import compile_model
    from inferpool.engine.options import RuntimeOptions

    exported = compile_model(MODEL, RuntimeOptions(backend="onnxruntime"), progress=lambda _: None)
    if not isinstance(exported.model, os.PathLike):
        raise SystemExit("the ONNX export cache is not writable here; set XDG_CACHE_HOME to a writable folder")
    return os.fspath(exported.model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    os.environ[ONNX_ENV] = export()  # the workers inherit it
    uvicorn.run(
        "loadtest.peers.bare_handler:app", host="127.0.0.1", port=args.port, loop="uvloop", http="httptools",
        workers=args.workers, log_config=None, access_log=False, lifespan="off",
    )  # fmt: skip


if __name__ == "__main__":
    main()
