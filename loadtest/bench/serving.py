"""The door at its capacity: wrk with fewer connections than the door admits must never be shed.

    python -m loadtest.bench_door [--backend eager --dispatch threads] [--rounds 3] [--seconds 8]

One serving process with 2 runtimes and ``max_queue`` 64 (capacity 66); wrk at 64 keep-alive
connections, cycling ``/predict`` JSON, v2 JSON and v2 binary; after each run, the
``load_shed`` refusals it caused and the door's count (which must be back at 0).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import httpx2

from inferpool.harness.metrics import metric_total
from inferpool.harness.payloads import digits_json, digits_v2_binary, digits_v2_json
from inferpool.harness.server import inferpool_serve, launch
from loadtest import wrk

PAYLOADS = {"predict-json": digits_json, "v2-json": digits_v2_json, "v2-binary": digits_v2_binary}


def total(url: str, name: str, **labels: str) -> float:
    return metric_total(httpx2.get(url + "/metrics").text, name, **labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--dispatch", default="threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-door-"))
    serve = ("--workers", "1", "--runtime.num-runtimes", "2", "--max-queue", "64",
             "--runtime.backend", args.backend, "--runtime.dispatch", args.dispatch)  # fmt: skip
    with launch(inferpool_serve(*serve), scratch, name="door") as server:
        capacity = httpx2.get(server.url + "/v2/models/digits/config").json()["capacity"]
        print(f"capacity {capacity}, {args.connections} connections, {' '.join(serve)}")
        for round_ in range(args.rounds):
            for name, payload in PAYLOADS.items():
                before = total(server.url, "inferpool_rejections_total", reason="load_shed")
                run = wrk.run_one(server.url, payload(), args.connections, duration=args.seconds, warmup=0,
                                  label=name, server_pid=server.process.pid, scratch=scratch)  # fmt: skip
                shed = total(server.url, "inferpool_rejections_total", reason="load_shed") - before
                door = total(server.url, "inferpool_door_requests")
                rate = run["achieved_rps"]
                print(f"round {round_} {name:<13} {rate:>7.0f} req/s  shed {shed:.0f}  door {door:.0f}", flush=True)


if __name__ == "__main__":
    main()
