"""The door at its capacity: wrk with fewer connections than the door admits must never be shed.

    python -m loadtest.bench_door [--backend eager --dispatch threads] [--rounds 3] [--seconds 8]

One serving process with 2 runtimes and ``max_queue`` 64 (capacity 66); wrk at 64 keep-alive
connections, cycling ``/predict`` JSON, v2 JSON and v2 binary; after each run, the
``load_shed`` refusals it caused and the door's count (which must be back at 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import httpx2

from loadtest import openloop, wrk
from loadtest.procs import inferpool_argv, launch
from loadtest.server import free_port, metric_total


def v2_json() -> openloop.Payload:
    tensor = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}
    body = json.dumps({"inputs": [tensor]}).encode()
    return openloop.Payload("/v2/models/digits/infer", body, (("content-type", "application/json"),))


PAYLOADS = {"predict-json": openloop.digits_json, "v2-json": v2_json, "v2-binary": openloop.digits_v2_binary}


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
    scratch, port = Path(tempfile.mkdtemp(prefix="bench-door-")), free_port()
    serve = ("--workers", "1", "--runtime.num-runtimes", "2", "--max-queue", "64",
             "--runtime.backend", args.backend, "--runtime.dispatch", args.dispatch)  # fmt: skip
    with launch("door", inferpool_argv(port, *serve), scratch, port=port) as server:
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
