"""The wire formats: v2 binary vs JSON (``codec``), and OpenAI's ``/v1/embeddings`` against
``/predict`` on MiniLM (``embeddings``).

    python -m loadtest.bench codec [--requests 40] [--in-process-only]
    python -m loadtest.bench embeddings [--sentences 1 16] [--connections 1 8] [--seconds 6] [--codec]

``codec``: binary (v2 binary tensor extension) vs JSON, server-side decode + encode and end to end.

Two inputs: a 1x3x224x224 FP32 image (602 KB raw; an echo model returns it, so it travels
both ways) and one 8x8 digit (the built-in model). The codec part times, in this process and
without HTTP, exactly what the server does to a request body and to the outputs: parse +
schema check, and response encoding. The end-to-end part sends pre-built bodies to a real
server on 127.0.0.1 over one keep-alive connection (median of ``--requests``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import orjson

from inferpool.engine import InferenceModule, TextEmbedding, load_model
from inferpool.harness.payloads import SENTENCE, Payload, embeddings_request, json_request
from inferpool.harness.server import inferpool_serve, launch, run_server, wait_ready
from inferpool.service.http import openai_codec
from inferpool.service.http.codec import decode_inputs, encode_json
from inferpool.service.v2.codec import encode_response, parse_request
from loadtest.bench import case_parser
from loadtest.openloop import RunConfig, run_one

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


def codec_parser() -> argparse.ArgumentParser:
    parser = case_parser("codec", __doc__)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--in-process-only", action="store_true", help="only decode + encode, no server")
    return parser


def codec(argv: list[str] | None = None) -> dict[tuple[str, str], dict[str, float]]:
    """Per (input, path): ``codec_us``, the decode + encode µs, and (with a server) ``p50_ms``."""
    args = codec_parser().parse_args(argv)
    rng = np.random.default_rng(0)
    figures: dict[tuple[str, str], dict[str, float]] = {}
    print(f"{'input':20} {'path':14} {'body KB':>8} {'decode+encode µs':>17} {'vs JSON':>8} {'e2e p50 ms':>11}")
    for case, (source, shape) in CASES.items():
        x = (rng.random(shape) * 16).astype(np.float32)
        module = InferenceModule.from_spec(load_model(source or "inferpool.engine.zoo.digits:build"))
        out = x if source else np.zeros((1, 10), np.float32)
        flags = ["--model", source, "--max-body-bytes", str(64 << 20)] if source else []
        with contextlib.ExitStack() as stack:
            http = None
            if not args.in_process_only:
                server = stack.enter_context(run_server(Path(tempfile.mkdtemp(prefix="inferpool-codec-")), *flags))
                wait_ready(server)
                http = stack.enter_context(httpx2.Client(base_url=server.url, timeout=60))
            model = "echo" if source else "digits"
            json_codec = None
            for path, (body, headers) in bodies(shape, x).items():
                row = figures[case, path] = {"codec_us": codec_us(module, path, body, headers, out)}
                json_codec = json_codec or row["codec_us"]
                p50 = "-"
                if http is not None:
                    url = "/predict" if path == "/predict JSON" else f"/v2/models/{model}/infer"
                    for _ in range(3):
                        http.post(url, content=body, headers=headers).raise_for_status()
                    latencies = []
                    for _ in range(args.requests):
                        started = time.perf_counter()
                        http.post(url, content=body, headers=headers).raise_for_status()
                        latencies.append(time.perf_counter() - started)
                    row["p50_ms"] = statistics.median(latencies) * 1e3
                    p50 = f"{row['p50_ms']:.2f}"
                print(
                    f"{case:20} {path:14} {len(body) / 1024:8.1f} {row['codec_us']:17.0f} "
                    f"{row['codec_us'] / json_codec:8.3f} {p50:>11}"
                )
    return figures


EMBEDDINGS_DOC = """OpenAI's ``/v1/embeddings`` against ``/predict`` on MiniLM: the same sentences, one server.

    python -m loadtest.bench embeddings [--sentences 1 16] [--connections 1 8] [--seconds 6]
                                        [--repeats 3] [--out DIR] [--codec] [--in-process-only]

One ``inferpool serve --config config/minilm.toml`` (eager, batching up to 16), then closed-loop
runs with ``loadtest.openloop`` (keep-alive connections, each sending its next request as soon
as it has its answer) of three routes with the same texts: ``/predict`` (``{"inputs": [...]}``),
``/v1/embeddings`` with floats (the same JSON numbers /predict answers) and with base64 (what
OpenAI's Python client asks for unless told otherwise). Requests of 1 or 16 sentences (~20
tokens each: one length bucket), over 1 and 8 connections. Interleaved: every variant once per
repeat, the order reversed every other repeat, so that machine noise spreads over all of them.
Server and generator share the machine's cores (no pinning). Prints each run, then the table:
requests/s of every run and the mean of /v1/embeddings over the mean of /predict.

The routes differ only in their own decoding and encoding (the engine path is the same), so
``--codec`` first times just that, in process, on the same bodies and on MiniLM-shaped outputs
(unit float32 vectors of 384): the median µs per request of each route's decode and encode, a
figure the machine's noise barely moves, to read beside the end-to-end ratios
(``--in-process-only``: only that, no server)."""

ROUTES = ("predict", "v1-float", "v1-base64")


def payload(route: str, sentences: int) -> Payload:
    texts = [f"{SENTENCE} ({i})" for i in range(sentences)]  # distinct, all in one length bucket
    inputs: str | list[str] = texts[0] if sentences == 1 else texts
    if route == "predict":
        return json_request(inputs)
    return embeddings_request("minilm", inputs, route.removeprefix("v1-"))


def route_codec_us(route: str, sentences: int, rounds: int = 2000) -> float:
    """Median µs of the route's own work for one request: body -> model payload, outputs -> body."""
    body = payload(route, sentences).body
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((sentences, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    outputs = {"embedding": vectors, "truncated": np.zeros(sentences, bool), "tokens": np.full(sentences, 24)}
    if sentences == 1 and route == "predict":  # one string in, one of each out (the handler's single case)
        outputs = {name: value[0] for name, value in outputs.items()}
    declared = TextEmbedding(384)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        if route == "predict":
            decode_inputs(body)
            encode_json({"model": "minilm", "outputs": outputs})
        else:
            request = openai_codec.parse_request(body)
            openai_codec.encode_response("minilm", outputs, declared, request)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def embeddings_parser() -> argparse.ArgumentParser:
    parser = case_parser("embeddings", EMBEDDINGS_DOC)
    parser.add_argument("--sentences", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-embeddings"))
    parser.add_argument("--codec", action="store_true", help="also time each route's decode + encode in process")
    parser.add_argument("--in-process-only", action="store_true", help="only the decode + encode table, no server")
    parser.add_argument("--codec-rounds", type=int, default=2000, help="requests timed per decode + encode cell")
    return parser


def embeddings(argv: list[str] | None = None) -> dict[tuple[int, str], float] | list[dict[str, Any]]:
    """With --in-process-only, decode + encode µs per (sentences, route); otherwise the runs."""
    args = embeddings_parser().parse_args(argv)
    if args.codec or args.in_process_only:
        figures = {}
        print("| sentences | route | decode + encode µs (median) |\n|---|---|---|")
        for sentences in args.sentences:
            for route in ROUTES:
                figures[sentences, route] = route_codec_us(route, sentences, args.codec_rounds)
                print(f"| {sentences} | {route} | {figures[sentences, route]:.1f} |", flush=True)
        if args.in_process_only:
            return figures
    args.out.mkdir(parents=True, exist_ok=True)
    variants = [(n, c, route) for n in args.sentences for c in args.connections for route in ROUTES]
    runs: list[dict[str, Any]] = []
    with launch(inferpool_serve("--config", "config/minilm.toml"), args.out, name="minilm") as server:
        for repeat in range(args.repeats):
            for sentences, connections, route in variants if repeat % 2 == 0 else variants[::-1]:
                config = RunConfig(
                    server.url, payload(route, sentences), duration=args.seconds, warmup=1.5,
                    concurrency=connections, label=f"{route} x{sentences} c{connections}",
                )  # fmt: skip
                run = run_one(config, server.process.pid)
                run |= {"route": route, "sentences": sentences, "repeat": repeat}
                runs.append(run)
                latency = run["latency_ms"]
                print(
                    f"{run['label']:<22} {run['achieved_rps']:>8.1f}/s  p50 {latency['p50']}  "
                    f"p99 {latency['p99']} ms  errors {run['other_status'] or 0}",
                    flush=True,
                )
    (args.out / "runs.json").write_text(json.dumps(runs, indent=2))
    print("\n| sentences | connections | route | req/s (each run) | vs /predict | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for sentences in args.sentences:
        for connections in args.connections:
            mine = [r for r in runs if r["sentences"] == sentences and r["concurrency"] == connections]
            base = statistics.fmean(r["achieved_rps"] for r in mine if r["route"] == "predict")
            for route in ROUTES:
                rows = [r for r in mine if r["route"] == route]
                rates = " / ".join(f"{r['achieved_rps']:.1f}" for r in rows)
                ratio = statistics.fmean(r["achieved_rps"] for r in rows) / base
                p50 = " / ".join(f"{r['latency_ms']['p50']:.1f}" for r in rows)
                p99 = " / ".join(f"{r['latency_ms']['p99']:.1f}" for r in rows)
                print(f"| {sentences} | {connections} | {route} | {rates} | {ratio:.3f} | {p50} | {p99} |")
    return runs
