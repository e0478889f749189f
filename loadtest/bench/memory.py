"""The no-flag server tree's memory by process and by kind of mapping, idle and after each load.

    python -m loadtest.bench memory [--seconds 10] [--concurrency 64] [--warmup 1] [--settle 1]
                                    [--body v2-json] [--runs 3] [-- extra serve flags]

Starts ``inferpool serve`` (no flags unless given after ``--``), reads every member's PSS by kind
of mapping (loadtest/smaps.py: the C heap, anonymous mappings, thread stacks, shared libraries,
other files, shared memory) once it is ready and has answered a few requests (idle), then again
after each load: ``--warmup`` then ``--seconds`` of Debian's ``wrk`` at each of ``--concurrency``'s
connection counts in turn, read ``--settle`` seconds after its end, on the body (what
``loadtest.compare``'s digits rows send). It prints a table per reading, what each reading added
per process and kind, the tree's total, how much of it processes outside the tree map too (PSS
splits those pages with them: the reading moves with the neighbours; frame numbers need root),
the load average and the rate. ``--runs`` starts a fresh server each time; the last lines give
every run's totals. Memory, not speed: a shared machine's load moves the rate, hardly the PSS.

``loadtest.compare``'s sweep (and its reading: at once after the last run) is
``--concurrency 1,8,64 --warmup 2 --seconds 6 --settle 0``, once with ``--body predict`` and once
with ``--body v2-json`` (its two InferPool rows are two servers).
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
from loadtest.smaps import KINDS, tree_pss_by_kind, tree_shared_outside

BODIES = {"v2-json": "digits-v2-json", "predict": "digits-json"}
COLUMNS = ("threads", "mappings", *KINDS)
Rows = list[dict[str, int]]
Reading = tuple[str, Rows, int]
"""What was read, the tree's PSS by member and kind, and its KiB that processes outside it map too."""


def memory_parser() -> argparse.ArgumentParser:
    parser = case_parser("memory", __doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="of each load, before its reading")
    parser.add_argument("--concurrency", default="64", help="comma-separated connection counts, one load each")
    parser.add_argument("--warmup", type=float, default=1.0, help="a wrk run of this long before each load")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds from a load's end to its reading")
    parser.add_argument("--body", choices=sorted(BODIES), default="v2-json")
    parser.add_argument("--runs", type=int, default=1, help="fresh servers, one after the other")
    parser.add_argument("serve", nargs="*", help="extra `inferpool serve` flags (after --)")
    return parser


def table(title: str, rows: Rows) -> str:
    """A Markdown table of the members' PSS by kind in MiB, and the tree's total."""
    head = f"{title}\n\n| pid | " + " | ".join(COLUMNS) + " | PSS MiB |\n|" + "---|" * (len(COLUMNS) + 2)
    lines = [head]
    for row in [*rows, {"pid": 0, **{c: sum(r[c] for r in rows) for c in COLUMNS}}]:
        cells = [str(row[c]) if c in ("threads", "mappings") else f"{row[c] / 1024:.1f}" for c in COLUMNS]
        total = sum(row[k] for k in KINDS) / 1024
        lines.append(f"| {row['pid'] or 'tree'} | " + " | ".join(cells) + f" | {total:.1f} |")
    return "\n".join(lines)


def added(before: Rows, after: Rows) -> Rows:
    """Per member of ``after``, what each column gained since ``before`` (a new member: all of it)."""
    earlier = {row["pid"]: row for row in before}
    empty = dict.fromkeys(COLUMNS, 0)
    return [{"pid": row["pid"], **{c: row[c] - earlier.get(row["pid"], empty)[c] for c in COLUMNS}} for row in after]


def total_mib(rows: Rows) -> float:
    return sum(row[k] for row in rows for k in KINDS) / 1024


def one_run(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    payload = PAYLOADS[BODIES[args.body]]()
    readings: list[Reading] = []
    rates = []
    with launch(inferpool_serve(*args.serve), logs, name="memory", ready_timeout=300) as server:
        pid = server.process.pid
        wrk.run_one(server.url, payload, 2, duration=1, warmup=0, label="touch", server_pid=pid, scratch=logs)
        time.sleep(1.0)
        readings.append(("idle (after a 1 s touch at 2 connections)", tree_pss_by_kind(pid), tree_shared_outside(pid)))
        for connections in [int(c) for c in args.concurrency.split(",")]:
            run = wrk.run_one(server.url, payload, connections, duration=args.seconds, warmup=args.warmup,
                              label="load", server_pid=pid, scratch=logs)  # fmt: skip
            rates.append(f"{run['achieved_rps']:.0f} req/s at {connections}")
            time.sleep(args.settle)  # with the default, the last answers out, the connections closed
            title = f"after {args.seconds:g} s of wrk at {connections} connections ({args.body})"
            readings.append((title, tree_pss_by_kind(pid), tree_shared_outside(pid)))
        load_average = os.getloadavg()
    for (title, rows, outside), (_, before, _) in zip(readings, [readings[0], *readings], strict=False):
        print(table(title, rows), end="\n\n")
        print(f"{outside / 1024:.1f} MiB of the tree's pages are mapped outside it too (PSS splits them)", end="\n\n")
        if rows is not before:
            print(table("what it added", added(before, rows)), end="\n\n")
    load = f"load average {load_average[0]:.2f} {load_average[1]:.2f}"
    totals = ", ".join(f"{total_mib(rows):.1f}" for _, rows, _ in readings)
    print(f"{'; '.join(rates)}; {load}; tree PSS MiB idle, then after each load: {totals}\n", flush=True)
    return {"readings": readings, "rates": rates, "load_average": load_average}


def memory(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = memory_parser().parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    runs = [one_run(args, logs) for _ in range(args.runs)]
    for number, run in enumerate(runs, 1):
        print(f"run {number}: tree PSS MiB " + ", ".join(f"{total_mib(rows):.1f}" for _, rows, _ in run["readings"]))
    return runs
