"""Where a server's time per request goes: wrk load plus py-spy, attributed by package.

    python -m loadtest.profile_server [--only NAME,...] [--concurrency 8] [--duration 10] [--gil]

For each server (InferPool eager / onnxruntime, the FastAPI baseline) on the digits CNN: start it
on a free 127.0.0.1 port, load it with Debian's ``wrk`` (closed loop, ``--concurrency``
keep-alive connections, one JSON digit per ``POST /predict``; wrk is C and costs far less CPU per
request than a Python generator), and sample it with py-spy (``--gil``: only the thread holding
the GIL, which is what a GIL-bound server is short of; without it, every thread on a CPU). Each
sample is charged to the innermost frame that belongs to a known component (model, validation,
JSON, metrics, middleware, FastAPI/Starlette, uvicorn, asyncio, worker hand-off), and reported
as microseconds per request (samples / rate / requests answered), beside the server's CPU per
request from /proc. Needs py-spy (``.venv/bin/py-spy``) and wrk.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from inferpool.harness.payloads import digits_json
from inferpool.harness.server import Command, launch
from loadtest.compare import variants
from loadtest.procs import tree_cpu_seconds

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
# Innermost match wins: the first pattern (in this order) found walking from the leaf up.
COMPONENTS: dict[str, str] = {
    "model (torch forward)": r"torch/nn/|engine/zoo/|engine/backends/|onnxruntime/",
    "input validation + numpy": r"engine/schema\.py|numpy/",
    "JSON decode/encode": r"service/http/codec\.py|orjson|json/|pydantic",
    "metrics": r"service/telemetry/metric(?:s|_slots)\.py|service/timing\.py|prometheus_client/",
    "admission + engine bookkeeping": (
        r"engine/serving/(admission|served|pool|pipeline|requests)\.py|engine/executors/batching\.py"
        r"|engine/executors/(__init__|base|inline)\.py"
    ),
    "worker hand-off (threads, futures)": (
        r"engine/executors/threads\.py|concurrent/futures|threading\.py|queue\.py|anyio/"
    ),
    "middleware + route code": (
        r"service/http/middleware\.py|service/http/routes/|service/models/host\.py|service/telemetry/logs\.py"
        r"|service/http/fastpath\.py|service/http/rawasgi\.py|service/errors\.py|service/auth\.py|peers/"
    ),
    "FastAPI/Starlette": r"fastapi/|starlette/",
    "uvicorn (HTTP protocol)": r"uvicorn/",
    "asyncio event loop": r"asyncio/",
}  # fmt: skip
LUA = """local f = io.open("{body}", "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
"""


def attribute(stacks: Path) -> Counter[str]:
    """Samples per component from py-spy's raw (collapsed) output: ``frame;frame;... count``."""
    patterns = [(name, re.compile(pattern)) for name, pattern in COMPONENTS.items()]
    found: Counter[str] = Counter()
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        found[_component(frames, patterns)] += int(count)
    return found


def _component(frames: list[str], patterns: list[tuple[str, re.Pattern[str]]]) -> str:
    for frame in reversed(frames):
        for name, pattern in patterns:
            if pattern.search(frame):
                return name
    return "other"


def wrk(url: str, lua: Path, concurrency: int, seconds: float) -> dict[str, float]:
    done = subprocess.run(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "-s", str(lua), url + "/predict"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    text = done.stdout
    requests = int(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {"requests": requests, "rps": rate, "non_2xx": int(errors.group(1)) if errors else 0}


def profile(name: str, command: Command, args: argparse.Namespace, out: Path) -> dict[str, object]:
    lua = out / "post.lua"
    with launch(command, out, name=name) as server:
        wrk(server.url, lua, args.concurrency, 3)  # warm-up
        stacks = out / f"{name.replace(' ', '_')}.txt"
        spy = [PY_SPY, "record", "-r", str(args.rate), "-d", f"{args.duration:g}", "--format", "raw", "-o", str(stacks)]
        # The serving processes are the supervisor's children: without --subprocesses py-spy
        # samples only the supervisor, which answers no request.
        spy += ["--subprocesses", "--pid", str(server.process.pid), *(["--gil"] if args.gil else [])]
        sampler = subprocess.Popen(spy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu = tree_cpu_seconds(server.process.pid)
        load = wrk(server.url, lua, args.concurrency, args.duration)
        cpu = tree_cpu_seconds(server.process.pid) - cpu
        sampler.wait(60)
    per_request = 1e6 / args.rate / load["requests"]
    samples = attribute(stacks)
    return {
        "name": name,
        **load,
        "server_cpu_us_per_request": round(cpu / load["requests"] * 1e6, 1),
        "sampled_us_per_request": {k: round(v * per_request, 1) for k, v in samples.most_common()},
        "sampled_total_us_per_request": round(sum(samples.values()) * per_request, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="InferPool eager,InferPool onnxruntime,FastAPI baseline")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=400, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="only samples holding the GIL")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="inferpool-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "body.json").write_bytes(digits_json().body)
    (out / "post.lua").write_text(LUA.format(body=out / "body.json"))
    wanted = [w.strip().lower() for w in args.only.split(",")]
    results = []
    for variant in variants(None):
        if variant.payload != "digits-json" or not any(w == variant.name.lower() for w in wanted):
            continue
        results.append(profile(variant.name, variant.argv, args, out))
        print(json.dumps(results[-1]), flush=True)
    (out / "profile.json").write_text(json.dumps(results, indent=1))
    names = sorted({k for r in results for k in r["sampled_us_per_request"]})  # type: ignore[attr-defined]
    print("\n| µs per request |" + "".join(f" {r['name']} |" for r in results))
    print("|---|" + "---|" * len(results))
    for row in ("rps", "server_cpu_us_per_request", "sampled_total_us_per_request"):
        print(f"| {row} |" + "".join(f" {r[row]} |" for r in results))
    for name in names:
        print(f"| {name} |" + "".join(f" {r['sampled_us_per_request'].get(name, 0)} |" for r in results))  # type: ignore[attr-defined]
    print(json.dumps({"results": str(out)}))


if __name__ == "__main__":
    main()
