"""Serving processes: memory of the whole process tree and start-up, one process vs the default.

    python -m loadtest.bench_processes [--seconds 10] [--only digits,minilm,resnet50,minilm-eager,...]

For each scenario, a server with ``--workers 1`` and one with no ``--workers`` (the default:
one serving process per usable CPU), started one at a time: seconds from start to the first
200 from ``/health/ready``, then a closed loop of ``--clients`` keep-alive clients for
``--seconds`` (so that every process has served and its lazily made state is counted), then
the sum of PSS over the tree (``/proc/PID/smaps_rollup``: shared pages divided among their
sharers, so the weights count once however many processes map them) and requests (or
sentences) per second. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import inferpool_serve, launch
from loadtest import openloop
from loadtest.procs import tree, tree_pss_bytes

SCENARIOS: dict[str, tuple[tuple[str, ...], str, int]] = {
    # name: (serve arguments, payload, clients)
    "digits": ((), "digits-json", 8),
    "minilm-eager": (("--config", "config/minilm.toml", "--runtime.backend", "eager"), "minilm-json", 16),
    "minilm-onnxruntime": (("--config", "config/minilm.toml", "--runtime.backend", "onnxruntime"), "minilm-json", 16),
    "minilm": (("--config", "config/minilm.toml"), "minilm-json", 16),  # as shipped (openvino bf16, wide lane)
    "resnet50": (("--model", "loadtest.resnet:build"), "resnet50-v2-binary", 4),
}


def measure(name: str, args: tuple[str, ...], payload: str, clients: int, seconds: float, logs: Path) -> dict[str, Any]:
    started = time.monotonic()
    with launch(inferpool_serve(*args), logs, name=name, ready_timeout=300) as server:
        ready_s = time.monotonic() - started
        config = openloop.RunConfig(server.url, PAYLOADS[payload](), duration=seconds, warmup=1.0,
                                    concurrency=clients, label=name)  # fmt: skip
        run = openloop.run_one(config, server.process.pid)
        pss = tree_pss_bytes(server.process.pid)
        processes = len(tree(server.process.pid))
    return {"name": name, "ready_s": ready_s, "pss_mb": pss / 2**20, "processes": processes,
            "rate": run["achieved_rps"], "p99_ms": run["latency_ms"]["p99"],
            "errors": run["requests"] - run["ok"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    print("| scenario | processes (tree) | ready s | PSS MB | req/s | p99 ms | errors | PSS / 1 process |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in args.only.split(","):
        serve_args, payload, clients = SCENARIOS[scenario]
        one = measure(f"{scenario} workers1", (*serve_args, "--workers", "1"), payload, clients, args.seconds, logs)
        default = measure(f"{scenario} default", serve_args, payload, clients, args.seconds, logs)
        for row in (one, default):
            ratio = row["pss_mb"] / one["pss_mb"]
            print(f"| {row['name']} | {row['processes']} | {row['ready_s']:.1f} | {row['pss_mb']:.0f} | "
                  f"{row['rate']:.0f} | {row['p99_ms']:.1f} | {row['errors']} | {ratio:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
