"""``inferpool bench``'s reference server: the least an ASGI app can do to serve ``/predict``.

    python -m inferpool.service.bench_reference --port N [--config FILE] [serve settings...]

One hand-written ASGI function under uvicorn with the server's own loop and HTTP settings
(uvloop, httptools, no access log): read the body, ``orjson.loads``, ``np.asarray``, the same
bare model call the bench times (inline, on the same backend), ``orjson.dumps`` the same
answer, two send messages. No routing, middleware, metrics, request ids, auth, validation,
admission, hand-off or error mapping. What InferPool's ``/predict`` costs beyond this is what
all its own machinery costs, engine included; the bench reports the two overheads side by side.
Any GET answers 200 (the bench's readiness probe).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from inferpool.config import load_settings
from inferpool.engine import ServedModel
from inferpool.service.http.codec import encode_json
from inferpool.service.models.host import plans, settings_shares

JSON_HEADERS = [(b"content-type", b"application/json")]


def bare_call(model: ServedModel) -> Callable[[object], dict[str, Any]]:
    """The model called inline on the request's array, as a bare app would: ``np.asarray`` and
    a batch dimension for one sample, no validation, admission or hand-off."""
    if model.handler is not None or len(model.schema.inputs) != 1:
        raise SystemExit("the bench reference takes single-input tensor models only")
    spec = model.schema.inputs[0]
    dtype, sample_ndim = np.dtype(spec.dtype), len(spec.shape) - 1

    def call(inputs: object) -> dict[str, Any]:
        array = np.asarray(inputs, dtype=dtype)
        single = array.ndim == sample_ndim
        outputs = model.call({spec.name: array[None] if single else array})
        return {name: out[0] for name, out in outputs.items()} if single else outputs

    return call


def reference_app(model: ServedModel) -> ASGIApp:
    call = bare_call(model)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b"{}"
        if scope["method"] == "POST":
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            outputs = {"model": model.name, "outputs": call(orjson.loads(b"".join(chunks))["inputs"])}
            body = encode_json(outputs)  # InferPool's own encoder: orjson, numpy scalars included
        headers = [*JSON_HEADERS, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferpool.service.bench_reference", description=__doc__)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, rest = parser.parse_known_args(argv)
    settings = load_settings(args.config, rest)
    todo = plans(settings)
    plan = todo[0]
    model = ServedModel.load(plan.source, plan.options, max_queue=settings.max_queue,
                             shares=settings_shares(settings), name=plan.name, handler=plan.handler)  # fmt: skip
    # As the server does: its switch interval, and the startup heap out of the collector's way.
    sys.setswitchinterval(settings.switch_interval)
    gc.collect()
    gc.freeze()
    try:
        uvicorn.run(
            reference_app(model), host=args.host, port=args.port, loop="uvloop", http="httptools",
            log_config=None, access_log=False, lifespan="off",
        )  # fmt: skip
    finally:
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
