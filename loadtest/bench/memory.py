"""The no-flag server tree's memory by process and by kind of mapping, idle and after load.

    python -m loadtest.bench memory [--seconds 10] [--connections 64] [--body v2-json] [--runs 3]
                                    [-- extra serve flags]

Starts ``inferpool serve`` (no flags unless given after ``--``), reads every member's PSS by kind
of mapping (loadtest/smaps.py: the C heap, anonymous mappings, thread stacks, shared libraries,
other files, shared memory) once it is ready and has answered a few requests (idle), then again
after ``--seconds`` of Debian's ``wrk`` at ``--connections`` on the body (what
``loadtest.compare``'s digits rows send), and prints both tables with the tree's total, the load
average and the rate. ``--runs`` starts a fresh server each time; the last line gives every run's
total after the load. Memory, not speed: a shared machine's load moves the rate, hardly the PSS.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import inferpool_serve, launch
from loadtest import wrk
from loadtest.bench import case_parser
from loadtest.smaps import KINDS, tree_pss_by_kind

BODIES = {"v2-json": "digits-v2-json", "predict": "digits-json"}
COLUMNS = ("threads", "mappings", *KINDS)


def memory_parser() -> argparse.ArgumentParser:
    parser = case_parser("memory", __doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="of load, before the second reading")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--body", choices=sorted(BODIES), default="v2-json")
    parser.add_argument("--runs", type=int, default=1, help="fresh servers, one after the other")
    parser.add_argument("serve", nargs="*", help="extra `inferpool serve` flags (after --)")
    return parser


def table(title: str, rows: list[dict[str, int]]) -> str:
    """A Markdown table of the members' PSS by kind in MiB, and the tree's total."""
    head = f"{title}\n\n| pid | " + " | ".join(COLUMNS) + " | PSS MiB |\n|" + "---|" * (len(COLUMNS) + 2)
    lines = [head]
    for row in [*rows, {"pid": 0, **{c: sum(r[c] for r in rows) for c in COLUMNS}}]:
        cells = [str(row[c]) if c in ("threads", "mappings") else f"{row[c] / 1024:.1f}" for c in COLUMNS]
        total = sum(row[k] for k in KINDS) / 1024
        lines.append(f"| {row['pid'] or 'tree'} | " + " | ".join(cells) + f" | {total:.1f} |")
    return "\n".join(lines)


def total_mib(rows: list[dict[str, int]]) -> float:
    return sum(row[k] for row in rows for k in KINDS) / 1024


def one_run(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    payload = PAYLOADS[BODIES[args.body]]()
    with launch(inferpool_serve(*args.serve), logs, name="memory", ready_timeout=300) as server:
        pid = server.process.pid
        wrk.run_one(server.url, payload, 2, duration=1, warmup=0, label="touch", server_pid=pid, scratch=logs)
        time.sleep(1.0)
        idle = tree_pss_by_kind(pid)
        run = wrk.run_one(server.url, payload, args.connections, duration=args.seconds, warmup=1.0,
                          label="load", server_pid=pid, scratch=logs)  # fmt: skip
        load_average = os.getloadavg()
        time.sleep(1.0)  # the last answers out, the connections closed
        loaded = tree_pss_by_kind(pid)
    print(table("idle (after a 1 s touch at 2 connections)", idle), end="\n\n")
    print(table(f"after {args.seconds:.0f} s of wrk at {args.connections} connections ({args.body})", loaded))
    load = f"load average {load_average[0]:.2f} {load_average[1]:.2f}"
    totals = f"tree PSS {total_mib(idle):.1f} MiB idle, {total_mib(loaded):.1f} MiB after the load"
    print(f"\n{run['achieved_rps']:.0f} req/s, {load}, {totals}\n", flush=True)
    return {"idle": idle, "loaded": loaded, "rate": run["achieved_rps"], "load_average": load_average}


def memory(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = memory_parser().parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    runs = [one_run(args, logs) for _ in range(args.runs)]
    after = ", ".join(f"{total_mib(r['loaded']):.1f}" for r in runs)
    idle = ", ".join(f"{total_mib(r['idle']):.1f}" for r in runs)
    print(f"tree PSS MiB per run: idle {idle}; after the load {after}")
    return runs
