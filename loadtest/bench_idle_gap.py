"""A model call's time back to back and after an idle gap, as a lone client's calls come: is a
served call slower than the bare engine's because the engine's threads went to sleep between?

    python -m loadtest.bench_idle_gap [--workload minilm1] [--threads 2] [--calls 150] [--rounds 3]

Loads the workload's model on the engine its defaults serve it with (``loadtest.workloads``), one
runtime of ``--threads`` intra-op threads, and prints per round the median ms of ``--calls`` calls
with a 0, 0.5, 1 and 3 ms sleep before each.
"""

from __future__ import annotations

import argparse
import statistics
import time

from inferpool.engine import RuntimeOptions, ServedModel
from loadtest.workloads import WORKLOADS, request_arrays

GAPS = (0.0, 0.0005, 0.001, 0.003)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="minilm1", choices=sorted(WORKLOADS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workload = WORKLOADS[args.workload]
    engine = {**dict(workload.engine), "warmup_iters": 1, "intra_op_threads": args.threads, "num_runtimes": 1}
    model = ServedModel.load(workload.source, RuntimeOptions(**engine, lend_idle_cores="off"), handler=workload.handler)
    arrays = request_arrays(model, workload)

    def median_ms(gap: float) -> float:
        times = []
        for _ in range(args.calls):
            if gap:
                time.sleep(gap)
            started = time.perf_counter()
            model.call(arrays)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e3

    for _ in range(args.rounds):
        row = " | ".join(f"gap {gap * 1e3:g} ms: {median_ms(gap):.2f}" for gap in GAPS)
        print(f"threads={args.threads} {row}", flush=True)
    model.close()


if __name__ == "__main__":
    main()
