"""What handing a request to a worker thread costs, measured through the real server.

    python -m loadtest.bench handoff [--seconds 8] [--repeats 2] [--in-process-only]

Needs ``wrk`` (Debian: ``apt-get install wrk``). Starts ``inferpool serve`` on 127.0.0.1 once
per variant and drives ``POST /predict`` (one digits sample) at 1 and 8 connections. Variants
run interleaved, ``--repeats`` times, so that machine noise spreads over all of them; wrk
shares the 2 cores with the server, so absolute req/s are lower than a remote client would
see, but the ratios between variants hold. Also prints the model's pure call time and the
in-process (no HTTP) round trip of each dispatch mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from inferpool.engine import RuntimeOptions, ServedModel
from inferpool.harness.server import run_server, wait_ready
from loadtest.bench import case_parser

SAMPLE = np.random.default_rng(0).integers(0, 17, size=(1, 8, 8)).tolist()
VARIANTS: dict[str, list[str]] = {
    "threads, switch 0.5 ms (default)": [],
    "threads, switch 5 ms (CPython default)": ["--switch-interval", "0.005"],
    "inline on the event loop": ["--runtime.dispatch", "inline"],
}
UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def wrk(url: str, connections: int, seconds: int, script: Path) -> dict[str, float]:
    threads = min(connections, 2)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 30,
    ).stdout
    result = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}  # type: ignore[union-attr]
    for pct in ("50", "99"):
        value, unit = re.search(rf"\s{pct}%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
        result[f"p{pct}_ms"] = float(value) * UNITS[unit] * 1e3
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    return result


def in_process(seconds: float = 2.0) -> dict[str, float]:
    """Median µs per awaited infer() with no HTTP, per dispatch mode, plus the bare model."""
    figures: dict[str, float] = {}
    for mode in ("inline", "threads"):
        model = ServedModel.load("inferpool.engine.zoo.digits:build", RuntimeOptions(dispatch=mode))

        async def loop(served: ServedModel = model) -> list[float]:
            times = []
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await served.infer(SAMPLE)
                times.append(time.perf_counter() - started)
            return times

        figures[f"infer() round trip, {mode}"] = statistics.median(asyncio.run(loop())) * 1e6
        figures[f"model call alone, {mode} setup"] = model.time_example_call(repeats=501) * 1e6
        model.close()
    return figures


def handoff_parser() -> argparse.ArgumentParser:
    parser = case_parser("handoff", __doc__)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--in-process-seconds", type=float, default=2.0, help="per dispatch mode, no HTTP")
    parser.add_argument("--in-process-only", action="store_true", help="only the in-process figures (no wrk)")
    return parser


def handoff(argv: list[str] | None = None) -> dict[str, float]:
    args = handoff_parser().parse_args(argv)
    if not args.in_process_only and shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    figures = in_process(args.in_process_seconds)
    for name, value in figures.items():
        print(f"{name:40} {value:8.1f} µs (median)")
    if args.in_process_only:
        return figures
    work = Path(tempfile.mkdtemp(prefix="inferpool-bench-"))
    script = work / "post.lua"
    body = json.dumps({"inputs": SAMPLE})
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\nwrk.headers["Content-Type"] = "application/json"\n'
    )
    rows: dict[tuple[str, int], list[dict[str, float]]] = {}
    for repeat in range(args.repeats):
        order = list(VARIANTS.items())
        for name, flags in order if repeat % 2 == 0 else reversed(order):
            with run_server(work, *flags) as server:
                wait_ready(server)
                wrk(server.url + "/predict", 4, 2, script)  # warm-up, excluded
                for connections in (1, 8):
                    rows.setdefault((name, connections), []).append(
                        wrk(server.url + "/predict", connections, args.seconds, script)
                    )
    print(f"\n{'variant':40} {'conns':>5} {'req/s':>16} {'p50 ms':>12} {'p99 ms':>12}   (each repeat)")
    for (name, connections), runs in rows.items():
        cells = [
            " / ".join(f"{run[key]:.{digits}f}" for run in runs)
            for key, digits in (("rps", 0), ("p50_ms", 2), ("p99_ms", 2))
        ]
        print(f"{name:40} {connections:5} {cells[0]:>16} {cells[1]:>12} {cells[2]:>12}")
    return figures
