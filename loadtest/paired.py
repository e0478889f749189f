"""The served rate against the bare engine's, in windows that alternate, for a machine whose speed
moves under the run (another tenant on the host: this VM's bare ResNet-50 rate fell from 24 to
13.5 img/s for 8 s and came back, docs/BENCHMARKS.md).

    python -m loadtest.paired [--workload resnet50] [--concurrency 1,4,16] [--windows 8]
                              [--seconds 4] [--bare-batch N] [--in-flight] [--out DIR]
                              [-- extra serve flags]

One InferPool server with no flags (the workload's own, as ``loadtest.compare`` starts it) and
the bare engine in this process (``loadtest.workloads.BareEngine``'s two settings: one stream on every
core for one connection, every core busy with single-thread runtimes for more). Per concurrency:
a warm-up, then bare, served, bare, served, ..., bare, each ``--seconds`` long; each served
window is held to the mean of the bare windows either side of it. A pair whose two bare windows
differ by more than ``STEADY`` is marked: the machine changed within it, and its ratio says
nothing about the server. ``--against-itself`` measures the bare engine in the served windows
too: how far a window strays from its neighbours with no server at all (the floor any "every
window ≥ x" goal meets on this machine). ``--in-flight`` holds each served window to a second
yardstick as well, timed after each bare window: the bare engine with no more requests in flight
than the connections carry (``in_flight``), what a closed loop of so many clients lets any server
reach. Prints Markdown; writes ``windows.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from inferpool.harness.payloads import PAYLOADS, Payload
from inferpool.harness.server import inferpool_serve, launch
from loadtest import wrk
from loadtest.workloads import WORKLOADS, BareEngine

Rate = Callable[[float], float]
"""Requests/s over a number of seconds."""
STEADY = 0.10
"""Most the two bare windows around a served one may differ (relative to their mean)."""
MAX_ROWS = 8
"""The largest batch ``--in-flight`` times: the served ResNet-50's own largest."""


def served_window(url: str, pid: int, payload: Payload, scratch: Path, concurrency: int, seconds: float) -> float:
    """Requests/s of one wrk run against the server (its own connections, opened anew)."""
    run = wrk.run_one(url, payload, concurrency, duration=seconds, warmup=0.0, label="served", server_pid=pid,
                      scratch=scratch)  # fmt: skip
    return float(run["achieved_rps"])


def pairs(bare: list[float], served: list[float]) -> list[dict[str, Any]]:
    """Each served window beside the mean of the bare windows either side of it."""
    found = []
    for index, rate in enumerate(served):
        before, after = bare[index], bare[index + 1]
        mean = (before + after) / 2
        found.append({
            "served": round(rate, 2), "bare_before": round(before, 2), "bare_after": round(after, 2),
            "ratio": round(rate / mean, 3), "steady": abs(before - after) / mean <= STEADY,
        })  # fmt: skip
    return found


def summary(concurrency: int, found: list[dict[str, Any]]) -> str:
    steady = [p["ratio"] for p in found if p["steady"]]
    shown = " / ".join(f"{p['ratio']:.2f}" + ("" if p["steady"] else "*") for p in found)
    if not steady:
        return f"| {concurrency} | {shown} | no steady pair | | |"
    middle, lowest = statistics.median(steady), min(steady)
    return f"| {concurrency} | {shown} | {len(steady)} of {len(found)} | {middle:.2f} | {lowest:.2f} |"


def in_flight(bare: BareEngine, concurrency: int, seconds: float) -> float:
    """The bare engine's best with no more requests in flight than ``concurrency`` closed-loop
    connections carry: every core on batches of its share of them, or one batch of all of them
    on the runtime as wide as the machine, each for half the window. Above one connection a
    served rate can reach this, not more: the requests a larger batch needs do not exist."""
    per_core = max(1, min(MAX_ROWS, concurrency // bare.cpus))
    return best_of(bare, min(concurrency, MAX_ROWS), seconds, per_core)


def best_of(bare: BareEngine, rows: int, seconds: float, per_core: int = 1) -> float:
    """The bare engine's best throughput: every core on batches of ``per_core`` requests, or
    batches of ``rows`` on one runtime as wide as the machine, each for half the window."""
    return max(bare.every_core(seconds / 2, per_core), bare.batched(seconds / 2, rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="resnet50", choices=sorted(WORKLOADS))
    parser.add_argument("--concurrency", default=None, help="default: the workload's own")
    parser.add_argument("--windows", type=int, default=8, help="served windows per concurrency")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=None)
    floor = "the bare engine in the served windows too: the floor the machine's noise sets"
    parser.add_argument("--against-itself", action="store_true", help=floor)
    best = "also time the bare engine's batches of N on every core: the bare rate above one connection is the larger"
    parser.add_argument("--bare-batch", type=int, default=1, metavar="N", help=best)
    carried = "also time the bare engine with at most as many requests in flight as the connections carry"
    parser.add_argument("--in-flight", action="store_true", help=carried)
    parser.add_argument("extra", nargs="*", help="more serve flags, after --")
    args = parser.parse_args()
    workload = WORKLOADS[args.workload]
    levels = [int(c) for c in args.concurrency.split(",")] if args.concurrency else list(workload.concurrency)
    out = args.out or Path(tempfile.mkdtemp(prefix="paired-"))
    out.mkdir(parents=True, exist_ok=True)
    payload = PAYLOADS[workload.payload_name]()
    bare_engine = BareEngine(workload)
    results: dict[int, list[dict[str, Any]]] = {}
    in_flights: dict[int, list[dict[str, Any]]] = {}
    try:
        with launch(inferpool_serve(*workload.args, *args.extra), out, name="InferPool defaults") as server:
            pid = server.process.pid
            for concurrency in levels:
                bare_rate = bare_engine.one_stream if concurrency == 1 else bare_engine.every_core
                if concurrency > 1 and args.bare_batch > 1:
                    bare_rate = partial(best_of, bare_engine, args.bare_batch)
                served_rate: Rate = partial(served_window, server.url, pid, payload, out, concurrency)
                served_rate(2.0)  # a warm-up: every window after it opens its own connections anew
                if args.against_itself:
                    served_rate = bare_rate
                held: Rate | None = None
                if args.in_flight and concurrency > 1:
                    held = partial(in_flight, bare_engine, concurrency)
                bare, bare_held, rates = [bare_rate(args.seconds)], [held(args.seconds) if held else 0.0], []
                for _ in range(args.windows):
                    rates.append(served_rate(args.seconds))
                    bare.append(bare_rate(args.seconds))
                    bare_held.append(held(args.seconds) if held else 0.0)
                results[concurrency] = pairs(bare, rates)
                print(summary(concurrency, results[concurrency]), flush=True)
                if held is not None:
                    in_flights[concurrency] = pairs(bare_held, rates)
                    print(summary(concurrency, in_flights[concurrency]), "(in flight)", flush=True)
    finally:
        bare_engine.close()
    found = {str(c): p for c, p in results.items()} | {f"{c} in flight": p for c, p in in_flights.items()}
    (out / "windows.json").write_text(json.dumps(found, indent=1))
    print(f"\n{args.workload}: served / bare by window (* the machine changed by over {STEADY:.0%} within the pair)")
    print("| connections | each window | steady pairs | median | lowest steady |\n|---|---|---|---|---|")
    for concurrency, windows in results.items():
        print(summary(concurrency, windows))
    if in_flights:
        print("\nserved / the bare engine with no more requests in flight than the connections carry")
        print("| connections | each window | steady pairs | median | lowest steady |\n|---|---|---|---|---|")
        for concurrency, windows in in_flights.items():
            print(summary(concurrency, windows))
    print(json.dumps({"windows": str(out / "windows.json")}))


if __name__ == "__main__":
    main()
