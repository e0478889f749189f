"""Binary (v2 binary tensor extension) vs JSON: server-side decode + encode and end to end.

    python -m loadtest.bench_codec [--requests 40]

Two inputs: a 1x3x224x224 FP32 image (602 KB raw; an echo model returns it, so it travels
both ways) and one 8x8 digit (the built-in model). The codec part times, in this process and
without HTTP, exactly what the server does to a request body and to the outputs: parse +
schema check, and response encoding. The end-to-end part sends pre-built bodies to a real
server on 127.0.0.1 over one keep-alive connection (median of ``--requests``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import numpy as np
import orjson

from inferpool.engine import InferenceModule, load_model
from inferpool.harness.server import run_server, wait_ready
from inferpool.service.http.codec import decode_inputs, encode_json
from inferpool.service.v2.codec import encode_response, parse_request

CASES = {"image 1x3x224x224": ("loadtest.models:image_echo", (1, 3, 224, 224)), "digit 1x1x8x8": (None, (1, 1, 8, 8))}


def bodies(shape: tuple[int, ...], x: np.ndarray) -> dict[str, tuple[bytes, dict[str, str]]]:
    tensor = {"name": "image", "shape": list(shape), "datatype": "FP32"}
    header = orjson.dumps({"inputs": [tensor | {"parameters": {"binary_data_size": x.nbytes}}],
                           "parameters": {"binary_data_output": True}})  # fmt: skip
    return {
        "/predict JSON": (orjson.dumps({"inputs": x.tolist()}), {}),
        "v2 JSON": (orjson.dumps({"inputs": [tensor | {"data": x.reshape(-1).tolist()}]}), {}),
        "v2 binary": (header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header))}),
    }


def median_us(fn: Callable[[], object], repeats: int = 30) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def codec_us(module: InferenceModule, path: str, body: bytes, headers: dict[str, str], out: np.ndarray) -> float:
    schema = module.schema
    outputs = {schema.outputs[0].name: out}
    if path == "/predict JSON":

        def run() -> object:
            schema.coerce_inputs({"image": decode_inputs(body)}, strict=True)
            return encode_json({"model": module.name, "outputs": outputs})
    else:

        def run() -> object:
            request = parse_request(bytearray(body), headers.get("Inference-Header-Content-Length"))
            schema.coerce_inputs(request.inputs, strict=True)
            return encode_response(module.name, request, outputs)

    return median_us(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'input':20} {'path':14} {'body KB':>8} {'decode+encode µs':>17} {'vs JSON':>8} {'e2e p50 ms':>11}")
    for case, (source, shape) in CASES.items():
        x = (rng.random(shape) * 16).astype(np.float32)
        module = InferenceModule.from_spec(load_model(source or "inferpool.engine.zoo.digits:build"))
        out = x if source else np.zeros((1, 10), np.float32)
        flags = ["--model", source, "--max-body-bytes", str(64 << 20)] if source else []
        with run_server(Path(tempfile.mkdtemp(prefix="inferpool-codec-")), *flags) as server:
            wait_ready(server)
            model = "echo" if source else "digits"
            with httpx2.Client(base_url=server.url, timeout=60) as http:
                json_codec = None
                for path, (body, headers) in bodies(shape, x).items():
                    url = "/predict" if path == "/predict JSON" else f"/v2/models/{model}/infer"
                    for _ in range(3):
                        http.post(url, content=body, headers=headers).raise_for_status()
                    latencies = []
                    for _ in range(args.requests):
                        started = time.perf_counter()
                        http.post(url, content=body, headers=headers).raise_for_status()
                        latencies.append(time.perf_counter() - started)
                    codec = codec_us(module, path, body, headers, out)
                    json_codec = json_codec or codec
                    print(
                        f"{case:20} {path:14} {len(body) / 1024:8.1f} {codec:17.0f} {codec / json_codec:8.3f} "
                        f"{statistics.median(latencies) * 1e3:11.2f}"
                    )


if __name__ == "__main__":
    main()
