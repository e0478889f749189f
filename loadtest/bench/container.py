"""The image against the same server on the host: no-flag ``POST /predict`` with wrk.

Starts the host server (this checkout; optionally a second checkout, e.g. the branch's start,
with ``--baseline DIR``) and the container (``docker run --network host --cpus 2``, 127.0.0.1
and free ports), all with no serving flags, then measures them interleaved: every round runs
each target at each connection count. Prints each container's start-to-ready time and one JSON
line per run. docs/BENCHMARKS.md, "The image", has the figures and the command.

    python -m loadtest.bench container --image inferpool:test --rounds 2 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2

from inferpool.harness.payloads import digits_json
from inferpool.harness.server import INFERPOOL, free_port
from loadtest.bench import case_parser
from loadtest.wrk import run_one


def _wait_ready(url: str, seconds: float = 180) -> float:
    started = time.monotonic()
    while time.monotonic() < started + seconds:
        try:
            if httpx2.get(url + "/health/ready", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready in {seconds} s")


def _host(checkout: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [INFERPOOL, "serve", "--host", "127.0.0.1", "--port", str(port), "--grpc-port", "0"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=checkout)


def _container(image: str, port: int, extra: list[str]) -> str:
    env = ["-e", "INFERPOOL_HOST=127.0.0.1", "-e", f"INFERPOOL_PORT={port}", "-e", "INFERPOOL_GRPC_PORT=0"]
    argv = ["docker", "run", "--detach", "--network", "host", "--cpus", "2", *extra, *env, image]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def container_parser() -> argparse.ArgumentParser:
    parser = case_parser("container", __doc__)
    parser.add_argument("--image", default="inferpool:test")
    parser.add_argument("--baseline", type=Path, help="a second checkout to serve on the host")
    parser.add_argument("--docker-arg", action="append", default=[], help="one more `docker run` argument")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, nargs="+", default=[8, 64])
    return parser


def container(argv: list[str] | None = None) -> None:
    args = container_parser().parse_args(argv)
    here = Path(__file__).resolve().parents[2]
    hosts = {"host": here, **({"host-baseline": args.baseline.resolve()} if args.baseline else {})}
    ports = {label: free_port() for label in [*hosts, "container"]}
    processes = {label: _host(checkout, ports[label]) for label, checkout in hosts.items()}
    container = _container(args.image, ports["container"], args.docker_arg)
    try:
        ready = {label: _wait_ready(f"http://127.0.0.1:{port}") for label, port in ports.items()}
        print(json.dumps({"start_to_ready_s": {k: round(v, 1) for k, v in ready.items()}}))
        inspect = ["docker", "inspect", "-f", "{{.State.Pid}}", container]
        pid = int(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
        pids = {**{label: p.pid for label, p in processes.items()}, "container": pid}
        with tempfile.TemporaryDirectory() as scratch:
            for round_ in range(args.rounds):
                for connections in args.connections:
                    for label, port in ports.items():
                        result = run_one(
                            f"http://127.0.0.1:{port}", digits_json(), connections, duration=args.seconds,
                            warmup=2, label=label, server_pid=pids[label], scratch=Path(scratch),
                        )  # fmt: skip
                        row = {"round": round_, "target": label, "connections": connections}
                        row |= {k: result[k] for k in ("achieved_rps", "connection_errors")}
                        row["p50_ms"] = result["latency_ms"]["p50"]
                        print(json.dumps(row), flush=True)
        print(json.dumps({"loadavg": os.getloadavg()}))
    finally:
        subprocess.run(["docker", "rm", "--force", container], capture_output=True, check=False)
        for process in processes.values():
            process.terminate()
            process.wait(30)
