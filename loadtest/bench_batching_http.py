"""Dynamic batching off vs on against the real server, over HTTP, many concurrent clients.

    python -m loadtest.bench_batching_http [--suite minilm digits] [--clients 32] [--seconds 6]
                                           [--repeats 2] [--out DIR]

For each suite, one ``inferpool serve`` per ``max_batch_size`` (all started before the first
run, so that every run meets a warm server), then closed-loop runs with ``loadtest.openloop``
(``--clients`` keep-alive connections, each sending its next request as soon as it has its
answer), interleaved: every variant once per repeat, the order reversed every other repeat, so
that machine noise spreads over all of them. Server and generator share the 2 cores (no
pinning: the server gets both, as in production; the generator's own CPU is in the JSON).

- ``minilm``: ``config/minilm.toml`` (eager, 1 intra-op thread, 2 runtimes), one ~20-token
  sentence per ``POST /predict``; ``max_batch_size`` 1 (off), 16 and 32.
- ``digits``: the default model, one JSON digit per ``POST /predict``; 1 (off) and 32.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from pathlib import Path
from typing import Any

from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import inferpool_serve, launch
from loadtest.openloop import RunConfig, run_one

SUITES: dict[str, tuple[list[str], str, tuple[int, ...]]] = {
    # name: (extra serve args, payload, max_batch_size values)
    "minilm": (["--config", "config/minilm.toml"], "minilm-json", (1, 16, 32)),
    "digits": ([], "digits-json", (1, 32)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", nargs="+", choices=sorted(SUITES), default=["minilm", "digits"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-batching-http"))
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
