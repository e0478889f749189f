"""Run a load scenario against a fresh InferPool server: ``python -m loadtest.run SCENARIO.toml``.

    python -m loadtest.run loadtest/scenarios/digits-json-open.toml [--out DIR] [--pin]
                           [--duration S] [--warmup S] [--rates 100,200] [--concurrency 1,8]

A scenario (TOML, see ``loadtest/scenarios/``)::

    name = "digits-json-open"
    [server]
    args = ["--model", "inferpool.engine.zoo.digits:build"]   # extra `inferpool serve` arguments
    [load]
    payload = "digits-json"        # digits-json | digits-v2-binary | minilm-json | minilm-v2-binary
    rates = [250, 500, 1000]       # open loop, offered req/s; or
    concurrency = [1, 8, 64]       # closed loop, keep-alive clients
    duration = 8                   # measured seconds per run
    warmup = 2                     # excluded seconds per run
    pin = false                    # server on CPU 1 (taskset), generator on CPU 0

Starts ``inferpool serve`` on a free 127.0.0.1 port, waits for readiness, runs every rate and
concurrency with ``loadtest.openloop``, and writes ``runs.json`` (each run plus the scenario,
the server's process-tree RSS and CPU) and the PNGs to ``--out`` (default: a new directory
under /tmp). Command-line values override the scenario's. SIGTERM or Ctrl-C stops it cleanly: the
server is stopped, the runs that finished are written (marked ``interrupted``), exit status 130.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import inferpool_serve, launch
from loadtest import openloop
from loadtest.openloop.cli import floats

LOAD_KEYS = {"payload", "rates", "concurrency", "duration", "warmup", "pin", "drain", "max_requests"}


def load_scenario(path: Path) -> dict[str, Any]:
    scenario = tomllib.loads(path.read_text())
    load = scenario.get("load", {})
    unknown = set(load) - LOAD_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown [load] keys {sorted(unknown)}")
    if load.get("payload", "digits-json") not in PAYLOADS:
        raise ValueError(f"{path}: payload must be one of {sorted(PAYLOADS)}")
    if not load.get("rates") and not load.get("concurrency"):
        raise ValueError(f"{path}: [load] needs rates (open loop) or concurrency (closed loop)")
    scenario.setdefault("name", path.stem)
    scenario.setdefault("server", {}).setdefault("args", [])
    return scenario


class Interrupted(Exception):
    """SIGTERM or SIGINT during a scenario: the server is stopped and the finished runs written."""

    def __init__(self, runs: list[dict[str, Any]]) -> None:
        super().__init__(f"interrupted after {len(runs)} run(s)")
        self.runs = runs


def run_scenario(scenario: dict[str, Any], out: Path, log_dir: Path | None = None) -> list[dict[str, Any]]:
    """Every rate and concurrency against one fresh server; raises Interrupted (after writing
    the runs that finished) on KeyboardInterrupt, which ``main`` makes SIGTERM raise too."""
    load = scenario["load"]
    out.mkdir(parents=True, exist_ok=True)
    pin = bool(load.get("pin", False))
    payload = PAYLOADS[load.get("payload", "digits-json")]()
    label = scenario["name"] + (" pinned" if pin else "")
    loads: list[tuple[float | None, int | None]] = [(float(r), None) for r in load.get("rates", [])]
    loads += [(None, int(c)) for c in load.get("concurrency", [])]
    runs: list[dict[str, Any]] = []
    previous = os.sched_getaffinity(0)
    interrupted = False
    try:
        # launch() stops the server's whole session on the way out, whatever interrupts it.
        with launch(
            inferpool_serve(*scenario["server"]["args"]), log_dir or out, name=scenario["name"],
            cpus=[1] if pin else None,
        ) as server:  # fmt: skip
            if pin:
                os.sched_setaffinity(0, {0})
            try:
                for rate, concurrency in loads:
                    config = openloop.RunConfig(
                        server.url, payload, rate=rate, concurrency=concurrency, label=label,
                        duration=float(load.get("duration", 10)), warmup=float(load.get("warmup", 2)),
                        drain=float(load.get("drain", 10)), max_requests=int(load.get("max_requests", 2_000_000)),
                    )  # fmt: skip
                    runs.append(openloop.run_one(config, server.process.pid))
            finally:
                os.sched_setaffinity(0, previous)
    except KeyboardInterrupt:
        interrupted = True
    for run in runs:
        run["scenario"] = scenario
        run["pinned"] = pin
        run["interrupted"] = interrupted
    openloop.write_results(runs, out, scenario["name"])
    if interrupted:
        raise Interrupted(runs)
    return runs


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="results directory (default: new one under /tmp)")
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--warmup", type=float, default=None)
    parser.add_argument("--rates", type=floats, default=None)
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",") if x], default=None)
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args()
    # SIGTERM (timeout, a CI runner) stops the run as Ctrl-C does: the server is stopped and the
    # runs that finished are written.
    signal.signal(signal.SIGTERM, _interrupt)
    scenario = load_scenario(args.scenario)
    load = scenario["load"]
    for key in ("duration", "warmup", "pin"):
        if getattr(args, key) is not None:
            load[key] = getattr(args, key)
    if args.rates is not None or args.concurrency is not None:
        load["rates"], load["concurrency"] = args.rates or [], args.concurrency or []
    out = args.out or Path(tempfile.mkdtemp(prefix=f"inferpool-{scenario['name']}-{time.strftime('%H%M%S')}-"))
    try:
        runs = run_scenario(scenario, out)
    except Interrupted as stop:
        for run in stop.runs:
            print(openloop.brief(run), flush=True)
        print(json.dumps({"results": str(out), "interrupted": True, "runs": len(stop.runs)}), flush=True)
        sys.exit(130)
    for run in runs:
        print(openloop.brief(run), f" server {run['server_cpu_cores']} cores {run['server_rss_mb']} MB", flush=True)
    print(json.dumps({"results": str(out), "files": sorted(p.name for p in out.iterdir())}))


if __name__ == "__main__":
    main()
