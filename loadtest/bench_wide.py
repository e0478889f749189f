"""The no-flag server on the workloads users bring, against the bare engine's own rate (the limit),
with and without lending idle cores to a call running alone (inferpool.engine.wide).

    python -m loadtest.bench_wide [--workloads resnet50,minilm16,minilm1,digits] [--duration 8]
                                  [--warmup 2] [--rounds 1] [--out DIR]

Per workload, one server at a time on a free 127.0.0.1 port, wrk (Debian's) closed-loop at each
concurrency: ``defaults`` (no flags beyond the workload's model or config) and ``lend off``
(``--runtime.lend-idle-cores off``, the plan before it), alternating order each round. The limit
is measured in this process first, no HTTP: one stream on every core (batch of one request, the
wide artifact) and every core busy (one single-thread runtime per core, each on its own thread).
Prints Markdown; writes ``runs.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from inferpool.harness.server import inferpool_serve, launch
from loadtest import wrk
from loadtest.workloads import WORKLOADS, limits

VARIANTS = {"defaults": (), "lend off": ("--runtime.lend-idle-cores", "off")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-wide-"))
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for name in args.workloads.split(","):
        workload = WORKLOADS[name]
        limit = limits(workload, min(args.duration, 5.0))
        print(f"\n### {name}: bare engine {limit['one_stream']} req/s one stream, {limit['every_core']} every core")
        print("| variant | " + " | ".join(f"c={c} req/s (p99 ms)" for c in workload.concurrency) + " | CPU at c=1 |")
        print("|---|" + "---|" * (len(workload.concurrency) + 1))
        order = list(VARIANTS)
        for round_ in range(args.rounds):
            for variant in order if round_ % 2 == 0 else order[::-1]:
                command = inferpool_serve(*workload.args, *VARIANTS[variant])
                with launch(command, ready_timeout=300, name=f"{name}-{variant}") as server:
                    cells, first_cpu = [], 0.0
                    for concurrency in workload.concurrency:
                        run = wrk.run_one(
                            server.url, workload.payload(), concurrency, duration=args.duration, warmup=args.warmup,
                            label=variant, server_pid=server.process.pid, scratch=out,
                        )  # fmt: skip
                        run |= {"workload": name, "round": round_, "limit": limit}
                        runs.append(run)
                        first_cpu = first_cpu or run["server_cpu_cores"]
                        cells.append(f"{run['achieved_rps']} ({run['latency_ms']['p99']})")
                print(f"| {variant} | " + " | ".join(cells) + f" | {first_cpu} |")
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print(f"\nruns: {out / 'runs.json'}")


if __name__ == "__main__":
    main()
