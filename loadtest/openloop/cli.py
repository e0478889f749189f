"""``python -m loadtest.openloop``: sweep rates or concurrencies against one URL."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import loadtest.openloop
from inferpool.harness.payloads import PAYLOADS
from loadtest.openloop.report import brief, write_results
from loadtest.openloop.sweep import sweep


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=loadtest.openloop.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url", help="base URL, 127.0.0.1 only (the payload gives the path)")
    parser.add_argument("--rates", type=floats, default=[], help="open loop: offered req/s, comma-separated")
    parser.add_argument("--concurrency", type=floats, default=[], help="closed loop: connections, comma-separated")
    parser.add_argument("--payload", choices=sorted(PAYLOADS), default="digits-json")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--drain", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=2_000_000)
    parser.add_argument("--connections", type=int, default=None, help="open loop: fixed pool size")
    parser.add_argument("--pin-cpu", type=int, default=None, help="run the generator on this CPU only")
    parser.add_argument("--server-pid", type=int, default=None, help="report this process tree's CPU and RSS")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=None, help="directory for runs.json and the PNGs")
    args = parser.parse_args()
    if not args.rates and not args.concurrency:
        parser.error("give --rates and/or --concurrency")
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    runs = sweep(
        args.url, PAYLOADS[args.payload](), rates=args.rates, concurrencies=[int(c) for c in args.concurrency],
        server_pid=args.server_pid, label=args.label, duration=args.duration, warmup=args.warmup,
        drain=args.drain, max_requests=args.max_requests, connections=args.connections,
    )  # fmt: skip
    for run in runs:
        print(brief(run), flush=True)
    if args.out:
        for path in write_results(runs, args.out, args.label):
            print(path)
