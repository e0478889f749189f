"""Per-call latency and 2-thread scaling of each backend on the digits CNN.

    python -m loadtest.bench_backends [--rounds N] [--calls N]

All rows run in one process, interleaved round by round, so that machine noise hits every
row alike. One intra-op thread everywhere (as the service runs by default). Each backend
builds its shared artifact once (``Runtime.compile``) and one runtime per thread.

- latency: median microseconds per ``runtime.run`` over every call of every round; the
  bracket is the range of the per-round medians (how noisy the machine was).
- scaling: calls/s of 2 threads, each with its own runtime on the shared module/session,
  over calls/s of 1 thread; 2.0 is perfect on 2 cores, 1.0 means the GIL (or a lock)
  serialises the calls.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np
import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions
from inferpool.engine.backends.base import Runtime
from inferpool.engine.threads import ThreadPlan, apply_thread_plan, init_worker_thread
from inferpool.engine.zoo.digits import build

BATCHES = (1, 32)
PLAN = ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1)


def latencies(runtime: Runtime, inputs: dict[str, np.ndarray], calls: int) -> list[float]:
    run, clock = runtime.run, time.perf_counter
    times = []
    for _ in range(calls):
        started = clock()
        run(inputs)
        times.append(clock() - started)
    return times


def throughput(runtimes: list[Runtime], inputs: dict[str, np.ndarray], calls: int) -> float:
    """Calls per second of len(runtimes) threads, each running ``calls`` calls on its own runtime."""
    barrier = threading.Barrier(len(runtimes) + 1)

    def work(runtime: Runtime) -> None:
        init_worker_thread(PLAN)  # torch's thread count is per thread
        barrier.wait()
        for _ in range(calls):
            runtime.run(inputs)

    threads = [threading.Thread(target=work, args=(r,)) for r in runtimes]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return len(runtimes) * calls / (time.perf_counter() - started)


def span(values: list[float], digits: int) -> str:
    return f"({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=400, help="calls per row per round (batch 1; batch 32 runs 1/8)")
    args = parser.parse_args()
    apply_thread_plan(PLAN)
    torch.set_num_threads(1)

    module = InferenceModule.from_spec(build())
    options = RuntimeOptions(intra_op_threads=1)
    runtimes: dict[str, list[Runtime]] = {}
    for name in ("eager", "onnxruntime", "torchscript"):
        backend = BACKENDS[name]
        started = time.perf_counter()
        compiled = backend.compile(module, options)
        print(f"{name}: compile {time.perf_counter() - started:.2f} s")
        runtimes[name] = [backend(module, options, compiled) for _ in range(2)]
        for runtime in runtimes[name]:
            runtime.warmup()

    rng = np.random.default_rng(0)
    inputs = {b: {"image": rng.integers(0, 17, size=(b, 1, 8, 8)).astype(np.float32)} for b in BATCHES}
    rows = [(name, b) for b in BATCHES for name in runtimes]
    samples: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    round_medians: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    ratios: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    single: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    for _ in range(args.rounds):
        for name, b in rows:
            calls = args.calls if b == 1 else max(1, args.calls // 8)
            pair = runtimes[name]
            times = latencies(pair[0], inputs[b], calls)
            samples[name, b] += times
            round_medians[name, b].append(statistics.median(times))
            one = throughput(pair[:1], inputs[b], calls)
            two = throughput(pair, inputs[b], calls)
            single[name, b].append(one)
            ratios[name, b].append(two / one)

    print(f"\n{args.rounds} rounds interleaved; 1 intra-op thread; digits CNN")
    print(f"{'backend':12} {'batch':>5} {'median us/call':>15} {'(round range)':>17} {'1-thread calls/s':>17} "
          f"{'2 thr / 1 thr':>14} {'(range)':>13}")  # fmt: skip
    for name, b in rows:
        us = [t * 1e6 for t in round_medians[name, b]]
        print(
            f"{name:12} {b:5d} {statistics.median(samples[name, b]) * 1e6:15.1f} {span(us, 1):>17} "
            f"{statistics.median(single[name, b]):17.0f} "
            f"{statistics.median(ratios[name, b]):14.2f} {span(ratios[name, b], 2):>13}"
        )
    for b in BATCHES:
        speedup = statistics.median(samples["eager", b]) / statistics.median(samples["onnxruntime", b])
        print(f"onnxruntime vs eager at batch {b}: {speedup:.1f}x faster per call")


if __name__ == "__main__":
    main()
