"""A lone request: v2 JSON against ``/predict`` on one keep-alive connection, one request at a
time, on the no-flag server (digits), A against B.

    python -m loadtest.bench lone [--checkout NAME=PATH ...] [--requests 3000] [--rounds 3]

At one connection a request's wall time is the server's CPU for it, the client's, and the wake-ups
between them. This case tells them apart for the two bodies of ``inferpool.harness.payloads``.
Each round sends them in turn on one connection (the order flipping every request), and gives
the median of the paired wall-time differences (v2 minus ``/predict``), measured by the client.
Then it sends each body in a block of ``--requests`` and reads the tree's CPU around the block
from ``/proc/*/task/*/schedstat`` (ns: ``/proc/*/stat`` counts 10 ms ticks, too coarse for a
block). The result is wall and CPU µs per request by body. Checkouts are served as
``http_cpu`` serves them (``--checkout NAME=PATH``, all at once) and taken in an order that
alternates per round. The client is Python (its own ~15 µs a request is in the wall times and
the same for both bodies). docs/development.md has the figures, and what moves wrk's rounds at
one connection (the vCPUs the client and the server run on).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from inferpool.harness.client import KeepAlive
from inferpool.harness.payloads import digits_json, digits_v2_json
from inferpool.harness.procs import tree_run_seconds
from inferpool.harness.server import Server
from loadtest.bench import case_parser
from loadtest.bench.http_cpu import checkout_option, print_medians, serve_checkouts

BODIES = {"v2": digits_v2_json, "predict": digits_json}
Figures = dict[str, list[float]]
"""By figure ("paired gap", "<body> wall", "<body> cpu"): its value in each round, µs."""


def lone_parser() -> argparse.ArgumentParser:
    parser = case_parser("lone", __doc__)
    checkout_option(parser)
    parser.add_argument("--requests", type=int, default=3000, help="requests per body per round, paired and in blocks")
    parser.add_argument("--warmup", type=int, default=300, help="requests per body before each round, not measured")
    parser.add_argument("--rounds", type=int, default=3)
    return parser


def one_round(server: Server, requests: int, warmup: int) -> dict[str, float]:
    """One round's figures against ``server`` on a new connection."""
    client = KeepAlive(server.port)
    try:
        sent = {name: client.encode(payload()) for name, payload in BODIES.items()}
        for request in [*sent.values()] * warmup:
            _exchanged(client, request)
        gaps = []
        clock = time.perf_counter
        for index in range(requests):
            took = {}
            for name, request in list(sent.items())[:: 1 if index % 2 == 0 else -1]:
                started = clock()
                _exchanged(client, request)
                took[name] = clock() - started
            gaps.append(took["v2"] - took["predict"])
        found = {"paired gap": statistics.median(gaps) * 1e6}
        for name, request in sent.items():
            cpu, started = tree_run_seconds(server.process.pid), clock()
            for _ in range(requests):
                _exchanged(client, request)
            found[f"{name} wall"] = (clock() - started) / requests * 1e6
            found[f"{name} cpu"] = (tree_run_seconds(server.process.pid) - cpu) / requests * 1e6
        return found
    finally:
        client.close()


def _exchanged(client: KeepAlive, request: bytes) -> None:
    status, body = client.exchange(request)
    if status != 200:
        raise RuntimeError(f"answered {status}: {body[:300]!r}")


def lone(argv: list[str] | None = None) -> dict[str, Figures]:
    """Each checkout's figures, a value per round."""
    args = lone_parser().parse_args(argv)
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        servers = serve_checkouts(stack, args.checkout, Path(scratch))
        found: dict[str, Figures] = {name: {} for name in servers}
        for round_ in range(args.rounds):
            for name, server in list(servers.items())[:: 1 if round_ % 2 == 0 else -1]:
                figures = one_round(server, args.requests, args.warmup)
                for figure, value in figures.items():
                    found[name].setdefault(figure, []).append(value)
                shown = "  ".join(f"{figure} {value:6.1f}" for figure, value in figures.items())
                print(f"round {round_ + 1} {name:10s} {shown}", flush=True)
    print_medians(
        f"µs per request, one connection, median (min-max) of {args.rounds} rounds:",
        {f"{name:10s} {figure:12s}": values for name, rows in found.items() for figure, values in rows.items()},
    )
    return found
