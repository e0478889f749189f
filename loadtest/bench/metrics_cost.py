"""GIL cost of the per-request metrics calls: the old prometheus-client objects vs the slots.

    python -m loadtest.bench metrics [--requests N] [--rounds R] [--old-ref REV]

One "request" is what the /predict path calls: ``observe_inference`` + ``observe_request`` +
``Inference.server_timing`` (plus, on its own row, building the ``Inference``). Old is
the metrics module at ``--old-ref`` (the commit before the slots), loaded from git as a
module; new is the working tree's. Rounds interleave old and new so that machine noise hits
both alike; the figure is µs per request net of the same loop calling methods that do nothing,
median and best over rounds. It then runs itself
again in a child process with ``PROMETHEUS_MULTIPROC_DIR`` set (prometheus-client picks its
mmap-backed values at import), where both write to the shared files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from loadtest.bench import case_parser

OLD_REF = "6145fd2251cf14a01d2746be4e0051beb5122411"  # service/ held metrics.py then
ROOT = Path(__file__).resolve().parents[2]


def load_old(ref: str) -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{ref}:service/metrics.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("metrics_old")
    sys.modules["metrics_old"] = module  # dataclasses look their module up
    exec(compile(source, "metrics_old.py", "exec"), module.__dict__)
    return module


class _Nothing:
    """The loop alone (calls that do nothing), subtracted from both: what is left is the metrics'."""

    def __init__(self, *args) -> None:
        pass

    def observe_inference(self, inference) -> None:
        pass

    def observe_request(self, route, status, seconds, inference) -> None:
        pass

    def server_timing(self, total) -> str:
        return ""


def per_request_loop(mod: types.ModuleType | None, build: bool):
    metrics = mod.Metrics() if mod else _Nothing()
    Inference = mod.Inference if mod else _Nothing
    inference = Inference("digits", 0.000031, 0.000012, 0.000182, 0.000009, 1)

    def run(n: int) -> float:
        observe_inference, observe_request = metrics.observe_inference, metrics.observe_request
        started = time.perf_counter()
        for i in range(n):
            seconds = 0.0002 + (i & 63) * 1e-5  # spread over several buckets
            inf = Inference("digits", 0.000031, 0.000012, seconds, 0.000009, 1) if build else inference
            observe_inference(inf)
            inf.server_timing(seconds + 0.0001)
            observe_request("/predict", 200, seconds + 0.0001, inf)
        return (time.perf_counter() - started) / n * 1e6

    run(1000)  # allocate children, warm up
    return run


def metrics_parser() -> argparse.ArgumentParser:
    parser = case_parser("metrics", __doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="calls per round and implementation")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-process", action="store_true", help="skip the multiprocess (mmap files) child run")
    return parser


def metrics(argv: list[str] | None = None) -> dict[bool, dict[str, list[float]]]:
    """Per row (False: the calls; True: with building the Inference), µs per request net of the bare
    loop, each round, for ``old`` and ``new``."""
    args = metrics_parser().parse_args(argv)

    import inferpool.service.telemetry.metrics as new

    old = load_old(args.old_ref)
    mode = "multiprocess (mmap files)" if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else "one process"
    rows = {}
    nets = {}
    for build in (False, True):
        loops = {"loop": per_request_loop(None, build), "old": per_request_loop(old, build)}
        loops["new"] = per_request_loop(new, build)
        times: dict[str, list[float]] = {name: [] for name in loops}
        for _ in range(args.rounds):
            for name, loop in loops.items():
                times[name].append(loop(args.requests))
        rows[build] = times
    print(f"{mode}: µs per request, median (best) of {args.rounds} interleaved rounds x {args.requests:,},")
    print("  net of the bare loop (its own cost in brackets)")
    for build, label in (
        (False, "observe_inference + observe_request + server_timing"),
        (True, "the same + Inference()"),
    ):
        loop = rows[build].pop("loop")
        # Round by round: the loop and the implementations ran back to back, under the same noise.
        net = {name: [t - base for t, base in zip(times, loop, strict=True)] for name, times in rows[build].items()}
        nets[build] = net
        cells = [f"{name} {statistics.median(t):5.2f} ({min(t):5.2f})" for name, t in net.items()]
        ratio = statistics.median(net["old"]) / statistics.median(net["new"])
        print(f"  {label:52s} [loop {statistics.median(loop):4.2f}]  {'  '.join(cells)}  {ratio:4.1f}x")
    if not args.child and not args.one_process:
        with tempfile.TemporaryDirectory() as directory:
            env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": directory}
            command = [sys.executable, "-m", "loadtest.bench", "metrics", "--child"]
            command += ["--requests", str(args.requests), "--rounds", str(args.rounds), "--old-ref", args.old_ref]
            subprocess.run(command, env=env, cwd=ROOT, check=True)
    return nets
