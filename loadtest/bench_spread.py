"""A few keep-alive clients on two serving processes: does every process do work, in every run?

    python -m loadtest.bench_spread [--workloads resnet50,digits] [--connections 2,4] [--runs 10]
                                    [--duration 4] [--workers 2] [--out DIR] [-- extra serve flags]

One server per workload (no flags beyond the model and ``--workers``), then ``--runs`` wrk runs
at each connection count; every run opens its connections anew, so each is a fresh draw of how
they land on the processes. Per run: requests/s, p99, and each serving process's CPU seconds per
wall second (from /proc), whose smaller share says whether a process idled. Run it on two
checkouts to compare (the script needs nothing of the change it measures). Prints Markdown;
writes ``runs.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from inferpool.harness.procs import CLOCK_TICKS, tree
from inferpool.harness.server import inferpool_serve, launch
from loadtest import wrk
from loadtest.workloads import WORKLOADS


def process_cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="resnet50,digits")
    parser.add_argument("--connections", default="2,4")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="more `inferpool serve` flags (after --)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-spread-"))
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for name in args.workloads.split(","):
        workload = WORKLOADS[name]
        command = inferpool_serve(*workload.args, "--workers", str(args.workers), *args.extra)
        with launch(command, ready_timeout=300, name=f"spread-{name}") as server:
            children = [pid for pid in tree(server.process.pid) if pid != server.process.pid]
            for connections in (int(c) for c in args.connections.split(",")):
                print(f"\n### {name}, {connections} connections, {len(children)} serving processes")
                print("| run | req/s | p99 ms | CPU per process (cores) | idle process |")
                print("|---|---|---|---|---|")
                for index in range(args.runs):
                    before, started = [process_cpu_seconds(pid) for pid in children], time.monotonic()
                    run = wrk.run_one(
                        server.url, workload.payload(), connections, duration=args.duration, warmup=0,
                        label=name, server_pid=server.process.pid, scratch=out,
                    )  # fmt: skip
                    wall = time.monotonic() - started
                    shares = [
                        round((process_cpu_seconds(pid) - b) / wall, 2) for pid, b in zip(children, before, strict=True)
                    ]
                    idle = min(shares) < 0.1
                    runs.append(run | {"workload": name, "run": index, "process_cores": shares, "idle": idle})
                    print(f"| {index} | {run['achieved_rps']} | {run['latency_ms']['p99']} | {shares} | "
                          f"{'**yes**' if idle else 'no'} |")  # fmt: skip
                rates = [r["achieved_rps"] for r in runs if r["workload"] == name and r["connections"] == connections]
                idled = sum(r["idle"] for r in runs if r["workload"] == name and r["connections"] == connections)
                print(
                    f"\nmin / max req/s {min(rates)} / {max(rates)}; runs with an idle process: {idled} of {len(rates)}"
                )
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print(f"\nruns: {out / 'runs.json'}")


if __name__ == "__main__":
    main()
