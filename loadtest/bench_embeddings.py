"""OpenAI's ``/v1/embeddings`` against ``/predict`` on MiniLM: the same sentences, one server.

    python -m loadtest.bench_embeddings [--sentences 1 16] [--connections 1 8] [--seconds 6]
                                        [--repeats 3] [--out DIR]

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
figure the machine's noise barely moves, to read beside the end-to-end ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine import TextEmbedding
from inferpool.harness.payloads import SENTENCE, Payload, embeddings_request, json_request
from inferpool.harness.server import inferpool_serve, launch
from inferpool.service.http.codec import decode_inputs, encode_json
from inferpool.service.http.openai_codec import encode_response, parse_request
from loadtest.openloop import RunConfig, run_one

ROUTES = ("predict", "v1-float", "v1-base64")


def payload(route: str, sentences: int) -> Payload:
    texts = [f"{SENTENCE} ({i})" for i in range(sentences)]  # distinct, all in one length bucket
    inputs: str | list[str] = texts[0] if sentences == 1 else texts
    if route == "predict":
        return json_request(inputs)
    return embeddings_request("minilm", inputs, route.removeprefix("v1-"))


def codec_us(route: str, sentences: int, rounds: int = 2000) -> float:
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
            request = parse_request(body)
            encode_response("minilm", outputs, declared, request)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-embeddings"))
    parser.add_argument("--codec", action="store_true", help="also time each route's decode + encode in process")
    args = parser.parse_args()
    if args.codec:
        print("| sentences | route | decode + encode µs (median) |\n|---|---|---|")
        for sentences in args.sentences:
            for route in ROUTES:
                print(f"| {sentences} | {route} | {codec_us(route, sentences):.1f} |", flush=True)
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


if __name__ == "__main__":
    main()
