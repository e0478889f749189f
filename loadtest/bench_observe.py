"""What tracing, the access log and the payload log cost per request, and that all-off costs nothing.

    python -m loadtest.bench_observe [--base DIR] [--rounds 3] [--seconds 8] [--connections 8 64]

One serving process per variant, all started first (idle ones cost nothing) with the backend
and dispatch auto picks on digits pinned (onnxruntime, inline), so every variant serves the
same way; then rounds of wrk on /predict JSON, the variants interleaved within each round so
that a change in the machine's load hits all of them alike. Variants: ``off`` (this checkout,
no observability flag), ``base`` (the checkout at ``--base``, e.g. ``git archive <rev> | tar
-x -C DIR``: today's server), ``tracing`` (sample 1.0, every request a trace of 5 spans,
exported over OTLP/HTTP to an in-process collector), ``access`` (the access log, JSON, to the
server's log file), ``payload`` (the payload log at sample 1.0 to a JSON-lines file). The
cost per request is the difference of 1/throughput with ``off`` (the server is one process
on the event loop: its time per request).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from inferpool.harness.payloads import digits_json
from inferpool.harness.server import INFERPOOL, free_port, inferpool_serve, launch
from loadtest import wrk

PINNED = ("--workers", "1", "--runtime.backend", "onnxruntime", "--runtime.dispatch", "inline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="a checkout of the revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[8, 64])
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-observe-"))
    collector_port = free_port()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    variants: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
        "off": ((), {}),
        "tracing": (("--tracing", "--trace-sample", "1.0"), otel),
        "access": (("--access-log", "--log-format", "json"), {}),
        "payload": (("--payload-log", str(scratch / "payloads.jsonl")), {}),
    }
    if args.base is not None:
        variants["base"] = ((), {"PYTHONPATH": str(args.base.resolve())})
    from tests.support.otlp_collector import http_collector  # the tests' receiver: spans are decoded

    with contextlib.ExitStack() as stack:
        collected = stack.enter_context(http_collector(collector_port))
        servers = {}
        for name, (flags, env) in variants.items():
            program = (INFERPOOL,) if name != "base" else (sys.executable, "-m", "inferpool.cli.main")
            command = inferpool_serve(*PINNED, *flags, program=program)
            servers[name] = stack.enter_context(launch(command, scratch, name=name, env=env))
        print(f"load {os.getloadavg()}; {' '.join(PINNED)}", flush=True)
        rates: dict[tuple[str, int], list[float]] = {}
        for round_ in range(args.rounds):
            for connections in args.connections:
                for name, server in servers.items():
                    run = wrk.run_one(server.url, digits_json(), connections, duration=args.seconds, warmup=1,
                                      label=name, server_pid=server.process.pid, scratch=scratch)  # fmt: skip
                    rates.setdefault((name, connections), []).append(run["achieved_rps"])
                    p50, p99 = run["latency_ms"]["p50"], run["latency_ms"]["p99"]
                    print(f"round {round_} c={connections:<3} {name:<8} {run['achieved_rps']:>8.0f} req/s  "
                          f"p50 {p50:.3f} ms  p99 {p99:.3f} ms  load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        print(f"collector received {len(collected.spans)} spans")
        for connections in args.connections:
            off = max(rates["off", connections])
            for name in variants:
                best = max(rates[name, connections])
                cost = (1 / best - 1 / off) * 1e6
                print(f"c={connections:<3} {name:<8} best {best:>8.0f} req/s  {cost:+7.1f} µs/request vs off")


if __name__ == "__main__":
    main()
