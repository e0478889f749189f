"""Dynamic batching off vs on, in process (no HTTP), on the digits CNN.

    python -m loadtest.bench_batching [--seconds 3] [--repeats 3] [--clients 16]

``--clients`` asyncio clients, each sending one single sample and awaiting the answer before
sending the next (closed loop), against ``ServedModel.infer`` for each backend (eager,
onnxruntime) with ``max_batch_size`` 1 (off), 8 and 32 (default ``max_queue_delay_us``).
Every variant is loaded once; the runs are interleaved, ``--repeats`` times, the order
reversed every other repeat, so that machine noise spreads over all of them. A 0.5 s warm-up
before each run is excluded. Per run: requests/s, p50 and p99 latency of an awaited
``infer()``, and the mean samples per model call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import numpy as np

from inferpool.engine import DEFAULT_MODEL, RuntimeOptions, ServedModel
from loadtest.inprocess import closed_loop

SAMPLE = np.random.default_rng(0).integers(0, 17, size=(1, 8, 8)).astype(np.float32).tolist()
BACKENDS = ("eager", "onnxruntime")
BATCH_SIZES = (1, 8, 32)


async def drive(model: ServedModel, clients: int, seconds: float) -> dict[str, float]:
    run = await closed_loop(model, [SAMPLE], clients, seconds, warmup=0.5)
    run["rps"] = run.pop("rate")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    models: dict[tuple[str, int], ServedModel] = {}
    for backend in BACKENDS:
        for size in BATCH_SIZES:
            options = RuntimeOptions(backend=backend, max_batch_size=size)
            models[backend, size] = ServedModel.load(DEFAULT_MODEL, options, max_queue=args.clients * 2)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {key: [] for key in models}
    try:
        for repeat in range(args.repeats):
            order = list(models.items())
            for key, model in order if repeat % 2 == 0 else reversed(order):
                runs[key].append(asyncio.run(drive(model, args.clients, args.seconds)))
    finally:
        for model in models.values():
            model.close()
    print(f"\n{args.clients} clients, single samples, {args.seconds:g} s per run, {args.repeats} runs interleaved")
    print(f"{'backend':12} {'max_batch':>9} {'req/s (each run)':>26} {'p50 ms':>20} {'p99 ms':>20} {'batch':>6}")
    for (backend, size), results in runs.items():
        cells = [" / ".join(f"{r[k]:.{d}f}" for r in results) for k, d in (("rps", 0), ("p50_ms", 2), ("p99_ms", 2))]
        batch = statistics.fmean(r["batch"] for r in results)
        print(f"{backend:12} {size:9d} {cells[0]:>26} {cells[1]:>20} {cells[2]:>20} {batch:6.1f}")
    for backend in BACKENDS:
        off = statistics.median(r["rps"] for r in runs[backend, 1])
        for size in BATCH_SIZES[1:]:
            on = statistics.median(r["rps"] for r in runs[backend, size])
            print(f"{backend}: max_batch_size {size} vs off: {on / off:.2f}x req/s (medians)")


if __name__ == "__main__":
    main()
