"""Real servers, one at a time: the door at its capacity (``door``), start-up (``start``), the
no-flag server on the workloads users bring (``wide``), serving processes' memory (``processes``).

    python -m loadtest.bench door [--backend eager --dispatch threads] [--rounds 3] [--seconds 8]
    python -m loadtest.bench start [--model loadtest.resnet:build] [--runs 2] [-- extra serve flags]
    python -m loadtest.bench wide [--workloads resnet50,minilm16,minilm1,digits] [--duration 8]
    python -m loadtest.bench processes [--seconds 10] [--only digits,minilm,resnet50,...]

``door`` and ``wide`` need ``wrk`` (Debian: ``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from inferpool.harness.metrics import metric_total
from inferpool.harness.payloads import PAYLOADS, digits_json, digits_v2_binary, digits_v2_json
from inferpool.harness.server import inferpool_serve, launch
from loadtest import openloop, wrk
from loadtest.bench import case_parser
from loadtest.procs import tree, tree_pss_bytes
from loadtest.workloads import WORKLOADS, limits

DOOR_DOC = """The door at its capacity: wrk with fewer connections than the door admits must never be shed.

    python -m loadtest.bench door [--backend eager --dispatch threads] [--rounds 3] [--seconds 8]

One serving process with 2 runtimes and ``max_queue`` 64 (capacity 66); wrk at 64 keep-alive
connections, cycling ``/predict`` JSON, v2 JSON and v2 binary; after each run, the
``load_shed`` refusals it caused and the door's count (which must be back at 0)."""

DOOR_PAYLOADS = {"predict-json": digits_json, "v2-json": digits_v2_json, "v2-binary": digits_v2_binary}


def total(url: str, name: str, **labels: str) -> float:
    return metric_total(httpx2.get(url + "/metrics").text, name, **labels)


def door_parser() -> argparse.ArgumentParser:
    parser = case_parser("door", DOOR_DOC)
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--dispatch", default="threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=64)
    return parser


def door(argv: list[str] | None = None) -> None:
    args = door_parser().parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-door-"))
    serve = ("--workers", "1", "--runtime.num-runtimes", "2", "--max-queue", "64",
             "--runtime.backend", args.backend, "--runtime.dispatch", args.dispatch)  # fmt: skip
    with launch(inferpool_serve(*serve), scratch, name="door") as server:
        capacity = httpx2.get(server.url + "/v2/models/digits/config").json()["capacity"]
        print(f"capacity {capacity}, {args.connections} connections, {' '.join(serve)}")
        for round_ in range(args.rounds):
            for name, payload in DOOR_PAYLOADS.items():
                before = total(server.url, "inferpool_rejections_total", reason="load_shed")
                run = wrk.run_one(server.url, payload(), args.connections, duration=args.seconds, warmup=0,
                                  label=name, server_pid=server.process.pid, scratch=scratch)  # fmt: skip
                shed = total(server.url, "inferpool_rejections_total", reason="load_shed") - before
                inside = total(server.url, "inferpool_door_requests")
                rate = run["achieved_rps"]
                print(f"round {round_} {name:<13} {rate:>7.0f} req/s  shed {shed:.0f}  door {inside:.0f}", flush=True)


START_DOC = """Seconds from ``inferpool serve`` to ready, cold (an empty compile cache) and warm (the cache the
cold start wrote: exports and ``auto``'s choice).

    python -m loadtest.bench start [--model loadtest.resnet:build] [--runs 2] [-- extra serve flags]

Each run is a new server on a free 127.0.0.1 port with its own cache directory for the cold start;
the warm runs reuse the last cold run's. Prints Markdown."""


def ready_seconds(model: str, cache: Path, extra: list[str]) -> float:
    command = inferpool_serve("--model", model, "--runtime.compile-cache-dir", str(cache), *extra)
    started = time.monotonic()
    with launch(command, ready_timeout=600, name="start"):
        return time.monotonic() - started


def start_parser() -> argparse.ArgumentParser:
    parser = case_parser("start", START_DOC)
    parser.add_argument("--model", default="loadtest.resnet:build")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("extra", nargs="*", help="more `inferpool serve` flags (after --)")
    return parser


def start(argv: list[str] | None = None) -> dict[str, list[float]]:
    """Seconds to ready of each run, ``cold`` and ``warm``."""
    args = start_parser().parse_args(argv)
    cold, warm = [], []
    for _ in range(args.runs):
        cache = Path(tempfile.mkdtemp(prefix="bench-start-"))
        try:
            cold.append(ready_seconds(args.model, cache, args.extra))
            warm.append(ready_seconds(args.model, cache, args.extra))
        finally:
            shutil.rmtree(cache, ignore_errors=True)  # a ResNet-50's exports: ~100 MB a run
    print(f"| {args.model} | cold s | warm s |\n|---|---|---|")
    for c, w in zip(cold, warm, strict=True):
        print(f"| run | {c:.1f} | {w:.1f} |")
    print(f"| median | {statistics.median(cold):.1f} | {statistics.median(warm):.1f} |")
    return {"cold": cold, "warm": warm}


WIDE_DOC = """The no-flag server on the workloads users bring, against the bare engine's own rate (the limit),
with and without lending idle cores to a call running alone (inferpool.engine.plan.wide).

    python -m loadtest.bench wide [--workloads resnet50,minilm16,minilm1,digits] [--duration 8]
                                  [--warmup 2] [--rounds 1] [--out DIR]

Per workload, one server at a time on a free 127.0.0.1 port, wrk (Debian's) closed-loop at each
concurrency: ``defaults`` (no flags beyond the workload's model or config) and ``lend off``
(``--runtime.lend-idle-cores off``, the plan before it), alternating order each round. The limit
is measured in this process first, no HTTP: one stream on every core (batch of one request, the
wide artifact) and every core busy (one single-thread runtime per core, each on its own thread).
Prints Markdown; writes ``runs.json`` to ``--out``."""

WIDE_VARIANTS = {"defaults": (), "lend off": ("--runtime.lend-idle-cores", "off")}


def wide_parser() -> argparse.ArgumentParser:
    parser = case_parser("wide", WIDE_DOC)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    return parser


def wide(argv: list[str] | None = None) -> None:
    args = wide_parser().parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-wide-"))
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for name in args.workloads.split(","):
        workload = WORKLOADS[name]
        limit = limits(workload, min(args.duration, 5.0))
        print(f"\n### {name}: bare engine {limit['one_stream']} req/s one stream, {limit['every_core']} every core")
        print("| variant | " + " | ".join(f"c={c} req/s (p99 ms)" for c in workload.concurrency) + " | CPU at c=1 |")
        print("|---|" + "---|" * (len(workload.concurrency) + 1))
        order = list(WIDE_VARIANTS)
        for round_ in range(args.rounds):
            for variant in order if round_ % 2 == 0 else order[::-1]:
                command = inferpool_serve(*workload.args, *WIDE_VARIANTS[variant])
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


PROCESSES_DOC = """Serving processes: memory of the whole process tree and start-up, one process vs the default.

    python -m loadtest.bench processes [--seconds 10] [--only digits,minilm,resnet50,minilm-eager,...]

For each scenario, a server with ``--workers 1`` and one with no ``--workers`` (the default:
one serving process per usable CPU), started one at a time: seconds from start to the first
200 from ``/health/ready``, then a closed loop of ``--clients`` keep-alive clients for
``--seconds`` (so that every process has served and its lazily made state is counted), then
the sum of PSS over the tree (``/proc/PID/smaps_rollup``: shared pages divided among their
sharers, so the weights count once however many processes map them) and requests (or
sentences) per second. Prints a Markdown table."""

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


def processes_parser() -> argparse.ArgumentParser:
    parser = case_parser("processes", PROCESSES_DOC)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    return parser


def processes(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """A row per server: one process, then the default, per scenario."""
    args = processes_parser().parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    rows: list[dict[str, Any]] = []
    print("| scenario | processes (tree) | ready s | PSS MB | req/s | p99 ms | errors | PSS / 1 process |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in args.only.split(","):
        serve_args, payload, clients = SCENARIOS[scenario]
        one = measure(f"{scenario} workers1", (*serve_args, "--workers", "1"), payload, clients, args.seconds, logs)
        default = measure(f"{scenario} default", serve_args, payload, clients, args.seconds, logs)
        rows += (one, default)
        for row in (one, default):
            ratio = row["pss_mb"] / one["pss_mb"]
            print(f"| {row['name']} | {row['processes']} | {row['ready_s']:.1f} | {row['pss_mb']:.0f} | "
                  f"{row['rate']:.0f} | {row['p99_ms']:.1f} | {row['errors']} | {ratio:.2f} |", flush=True)  # fmt: skip
    return rows
