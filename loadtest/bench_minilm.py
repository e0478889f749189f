"""MiniLM sentence embeddings: sentences/s and latency, per backend, batching off/on.

    python -m loadtest.bench_minilm [--seconds 5] [--repeats 2] [--clients 1 16]

In process (``ServedModel.infer`` with the MiniLM handler: tokenising, padding to a length
bucket, the model, pooling; no HTTP). Each of ``--clients`` asyncio clients sends one sentence
(drawn in turn from a fixed set of 8-30 token sentences, so buckets 16 and 32) and awaits the
answer before sending the next. Variants: ``--backends`` x ``--batch-sizes`` (``max_batch_size``;
1 = off; ``max_queue_delay_us`` from ``--delay-us``); each loaded once, runs interleaved ``--repeats`` times,
order reversed every other repeat; a 1 s warm-up per run is excluded.
"""

from __future__ import annotations

import argparse
import asyncio

from inferpool.engine import RuntimeOptions, ServedModel
from loadtest.inprocess import closed_loop

SENTENCES = [
    "The cat sat on the mat.",
    "Serving transformers on CPUs is mostly about batching and thread budgets.",
    "How do I reset my password?",
    "A quick brown fox jumps over the lazy dog while the farmer watches from the porch nearby.",
    "Embeddings map sentences to vectors.",
    "What is the capital of France, and how many people live there today?",
]


async def drive(model: ServedModel, clients: int, seconds: float) -> dict[str, float]:
    run = await closed_loop(model, SENTENCES, clients, seconds, warmup=1.0)
    run["sps"] = run.pop("rate")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--backends", nargs="+", default=["eager", "onnxruntime"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16], help="max_batch_size values")
    parser.add_argument("--delay-us", type=float, default=2000.0, help="max_queue_delay_us when batching")
    args = parser.parse_args()
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
                    run = asyncio.run(drive(models[key], clients, args.seconds))
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


if __name__ == "__main__":
    main()
