"""Dynamic batching off vs on: in process on the digits CNN (``batching``) and on MiniLM
(``minilm``), and against the real server over HTTP (``batching_http``).

    python -m loadtest.bench batching [--seconds 3] [--repeats 3] [--clients 16]
    python -m loadtest.bench minilm [--seconds 5] [--repeats 2] [--clients 1 16]
    python -m loadtest.bench batching_http [--suite minilm digits] [--clients 32] [--seconds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine import DEFAULT_MODEL, RuntimeOptions, ServedModel
from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import inferpool_serve, launch
from loadtest.bench import case_parser
from loadtest.inprocess import closed_loop
from loadtest.openloop import RunConfig, run_one

BATCHING_DOC = """Dynamic batching off vs on, in process (no HTTP), on the digits CNN.

    python -m loadtest.bench batching [--seconds 3] [--repeats 3] [--clients 16]

``--clients`` asyncio clients, each sending one single sample and awaiting the answer before
sending the next (closed loop), against ``ServedModel.infer`` for each backend (eager,
onnxruntime) with ``max_batch_size`` 1 (off), 8 and 32 (default ``max_queue_delay_us``).
Every variant is loaded once; the runs are interleaved, ``--repeats`` times, the order
reversed every other repeat, so that machine noise spreads over all of them. A 0.5 s warm-up
before each run is excluded. Per run: requests/s, p50 and p99 latency of an awaited
``infer()``, and the mean samples per model call."""

SAMPLE = np.random.default_rng(0).integers(0, 17, size=(1, 8, 8)).astype(np.float32).tolist()


def batching_parser() -> argparse.ArgumentParser:
    parser = case_parser("batching", BATCHING_DOC)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--backends", nargs="+", default=["eager", "onnxruntime"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32], help="max_batch_size values")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before each run, excluded")
    return parser


def batching(argv: list[str] | None = None) -> dict[tuple[str, int], list[dict[str, float]]]:
    args = batching_parser().parse_args(argv)
    models: dict[tuple[str, int], ServedModel] = {}
    for backend in args.backends:
        for size in args.batch_sizes:
            options = RuntimeOptions(backend=backend, max_batch_size=size)
            models[backend, size] = ServedModel.load(DEFAULT_MODEL, options, max_queue=args.clients * 2)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {key: [] for key in models}
    try:
        for repeat in range(args.repeats):
            order = list(models.items())
            for key, model in order if repeat % 2 == 0 else reversed(order):
                run = asyncio.run(closed_loop(model, [SAMPLE], args.clients, args.seconds, warmup=args.warmup))
                run["rps"] = run.pop("rate")
                runs[key].append(run)
    finally:
        for model in models.values():
            model.close()
    print(f"\n{args.clients} clients, single samples, {args.seconds:g} s per run, {args.repeats} runs interleaved")
    print(f"{'backend':12} {'max_batch':>9} {'req/s (each run)':>26} {'p50 ms':>20} {'p99 ms':>20} {'batch':>6}")
    for (backend, size), results in runs.items():
        cells = [" / ".join(f"{r[k]:.{d}f}" for r in results) for k, d in (("rps", 0), ("p50_ms", 2), ("p99_ms", 2))]
        batch = statistics.fmean(r["batch"] for r in results)
        print(f"{backend:12} {size:9d} {cells[0]:>26} {cells[1]:>20} {cells[2]:>20} {batch:6.1f}")
    if 1 in args.batch_sizes:
        for backend in args.backends:
            off = statistics.median(r["rps"] for r in runs[backend, 1])
            for size in args.batch_sizes:
                if size != 1:
                    on = statistics.median(r["rps"] for r in runs[backend, size])
                    print(f"{backend}: max_batch_size {size} vs off: {on / off:.2f}x req/s (medians)")
    return runs


MINILM_DOC = """MiniLM sentence embeddings: sentences/s and latency, per backend, batching off/on.

    python -m loadtest.bench minilm [--seconds 5] [--repeats 2] [--clients 1 16]

In process (``ServedModel.infer`` with the MiniLM handler: tokenising, padding to a length
bucket, the model, pooling; no HTTP). Each of ``--clients`` asyncio clients sends one sentence
(drawn in turn from a fixed set of 8-30 token sentences, so buckets 16 and 32) and awaits the
answer before sending the next. Variants: ``--backends`` x ``--batch-sizes`` (``max_batch_size``;
1 = off; ``max_queue_delay_us`` from ``--delay-us``); each loaded once, runs interleaved ``--repeats`` times,
order reversed every other repeat; a 1 s warm-up per run is excluded. Needs the ``minilm`` extra."""

SENTENCES = [
    "The cat sat on the mat.",
    "Serving transformers on CPUs is mostly about batching and thread budgets.",
    "How do I reset my password?",
    "A quick brown fox jumps over the lazy dog while the farmer watches from the porch nearby.",
    "Embeddings map sentences to vectors.",
    "What is the capital of France, and how many people live there today?",
]


def minilm_parser() -> argparse.ArgumentParser:
    parser = case_parser("minilm", MINILM_DOC)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--backends", nargs="+", default=["eager", "onnxruntime"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16], help="max_batch_size values")
    parser.add_argument("--delay-us", type=float, default=2000.0, help="max_queue_delay_us when batching")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before each run, excluded")
    return parser


def minilm(argv: list[str] | None = None) -> dict[tuple[str, int, int], list[dict[str, float]]]:
    args = minilm_parser().parse_args(argv)
    variants = [(backend, batch) for backend in args.backends for batch in args.batch_sizes]
    models = {}
    for backend, batch in variants:
        options = RuntimeOptions(backend=backend, max_batch_size=batch, max_queue_delay_us=args.delay_us)
        models[backend, batch] = ServedModel.load(
            "inferpool.engine.zoo.minilm:build", options, handler="inferpool.engine.zoo.minilm:MiniLMHandler"
        )
    results: dict[tuple[str, int, int], list[dict[str, float]]] = {}
    try:
        for repeat in range(args.repeats):
            order = variants if repeat % 2 == 0 else variants[::-1]
            for clients in args.clients:
                for key in order:
                    run = asyncio.run(closed_loop(models[key], SENTENCES, clients, args.seconds, warmup=args.warmup))
                    run["sps"] = run.pop("rate")
                    results.setdefault((*key, clients), []).append(run)
    finally:
        for model in models.values():
            model.close()
    print("| backend | max_batch_size | clients | sentences/s | p50 ms | p99 ms | mean batch |")
    print("|---|---|---|---|---|---|---|")
    for (backend, batch, clients), runs in sorted(results.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):

        def span(field: str, runs: list[dict[str, float]] = runs) -> str:
            values = [r[field] for r in runs]
            return f"{min(values):.1f}" if len(values) == 1 else f"{min(values):.1f}-{max(values):.1f}"

        figures = " | ".join(span(field) for field in ("sps", "p50_ms", "p99_ms", "batch"))
        print(f"| {backend} | {batch} | {clients} | {figures} |")
    return results


BATCHING_HTTP_DOC = """Dynamic batching off vs on against the real server, over HTTP, many concurrent clients.

    python -m loadtest.bench batching_http [--suite minilm digits] [--clients 32] [--seconds 6]
                                           [--repeats 2] [--out DIR]

For each suite, one ``inferpool serve`` per ``max_batch_size`` (all started before the first
run, so that every run meets a warm server), then closed-loop runs with ``loadtest.openloop``
(``--clients`` keep-alive connections, each sending its next request as soon as it has its
answer), interleaved: every variant once per repeat, the order reversed every other repeat, so
that machine noise spreads over all of them. Server and generator share the 2 cores (no
pinning: the server gets both, as in production; the generator's own CPU is in the JSON).

- ``minilm``: ``config/minilm.toml`` (eager, 1 intra-op thread, 2 runtimes), one ~20-token
  sentence per ``POST /predict``; ``max_batch_size`` 1 (off), 16 and 32.
- ``digits``: the default model, one JSON digit per ``POST /predict``; 1 (off) and 32."""

SUITES: dict[str, tuple[list[str], str, tuple[int, ...]]] = {
    # name: (extra serve args, payload, max_batch_size values)
    "minilm": (["--config", "config/minilm.toml"], "minilm-json", (1, 16, 32)),
    "digits": ([], "digits-json", (1, 32)),
}


def batching_http_parser() -> argparse.ArgumentParser:
    parser = case_parser("batching_http", BATCHING_HTTP_DOC)
    parser.add_argument("--suite", nargs="+", choices=sorted(SUITES), default=["minilm", "digits"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-batching-http"))
    return parser


def batching_http(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = batching_http_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for suite in args.suite:
        serve_args, payload, sizes = SUITES[suite]
        with contextlib.ExitStack() as stack:
            servers = {}
            for size in sizes:
                command = inferpool_serve(*serve_args, "--runtime.max-batch-size", str(size))
                servers[size] = stack.enter_context(launch(command, args.out, name=f"{suite}-b{size}"))
            for repeat in range(args.repeats):
                for size in sizes if repeat % 2 == 0 else sizes[::-1]:
                    server = servers[size]
                    config = RunConfig(
                        server.url, PAYLOADS[payload](), duration=args.seconds, warmup=1.5,
                        concurrency=args.clients, label=f"{suite} max_batch_size={size}",
                    )  # fmt: skip
                    run = run_one(config, server.process.pid)
                    run |= {"suite": suite, "max_batch_size": size, "repeat": repeat}
                    runs.append(run)
                    latency = run["latency_ms"]
                    print(
                        f"{run['label']:<28} {run['achieved_rps']:>8.1f}/s  p50 {latency['p50']}  "
                        f"p99 {latency['p99']} ms  errors {run['other_status'] or 0}",
                        flush=True,
                    )
    (args.out / "runs.json").write_text(json.dumps(runs, indent=2))
    print("\n| model | max_batch_size | clients | req/s (each run) | vs off | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for suite in args.suite:
        mine = [r for r in runs if r["suite"] == suite]
        off = statistics.fmean(r["achieved_rps"] for r in mine if r["max_batch_size"] == 1)
        for size in SUITES[suite][2]:
            rows = [r for r in mine if r["max_batch_size"] == size]
            rates = " / ".join(f"{r['achieved_rps']:.0f}" for r in rows)
            gain = statistics.fmean(r["achieved_rps"] for r in rows) / off
            p50 = " / ".join(f"{r['latency_ms']['p50']:.1f}" for r in rows)
            p99 = " / ".join(f"{r['latency_ms']['p99']:.1f}" for r in rows)
            label = f"{size} (off)" if size == 1 else str(size)
            print(f"| {suite} | {label} | {args.clients} | {rates} | {gain:.2f}x | {p50} | {p99} |")
    return runs
