"""The server tree's CPU per HTTP request at 64 connections: what the front end costs, A against B.

    python -m loadtest.bench http_cpu [--checkout NAME=PATH ...] [--requests 20000] [--rounds 5]
    python -m loadtest.bench http_cpu --serve off="--response-cache-mb 0" --serve on="--response-cache-mb 64" \
        --body predict-new --connections 32 --warmup 5000 --rounds 20  # what a miss costs

Starts ``inferpool serve`` with no flags (digits, the default model: every serving process the
machine's CPUs give, and their supervisor) once per ``--checkout`` (a tree whose ``inferpool``
it imports: ``PYTHONPATH=PATH``; without one, this checkout), all at once, and loads one at a
time with Debian's ``wrk`` (C, one thread, not counted: only the server tree is read) until
``--requests`` answers, for each body (the v2 JSON infer and ``/predict``, as
``inferpool.harness.payloads`` builds them). The figure is the CPU time the tree's threads ran
(``/proc/*/task/*/schedstat`` of the supervisor and every serving process, in ns: the stat files'
10 ms ticks put ~0.25 µs steps into a 40,000-request block) across the run, divided by the
answers: CPU µs per request. Wall-clock throughput on a shared machine is noise; CPU time per
request much less so. Rounds interleave the checkouts (the order alternating per round) so that
both meet the same machine; each is given as the median of its rounds, beside the load average.

``python -m loadtest.bench fronts [--granian DIR]`` measures front ends the same way on
``/predict``: the bare handler (loadtest/peers/bare_handler.py) under uvicorn's ASGI, under a plain
asyncio protocol on httptools (loadtest/peers/bare_fronts.py: what InferPool's lane does, with
nothing of InferPool's around it) and, with ``--granian DIR`` (``pip install --target DIR granian``:
never into the product's venv), under granian's ASGI and RSGI; InferPool with no flags beside them.

The A/B of two revisions: ``git worktree add /tmp/before REV`` and
``--checkout before=/tmp/before --checkout after=.``. The A/B of two settings: ``--serve
NAME=FLAGS`` (repeatable), this checkout served with ``inferpool serve FLAGS``; ``--body
predict-new`` makes every request a new image (loadtest/bench/new_images.py), which no response
cache has seen. Two servers of the same settings differ too (up to ~1 µs a request between the
medians of 20 rounds under load): serve the same settings twice beside an A/B to see that floor.
``--profile DIR``: the serving processes run under cProfile on their thread's CPU clock
(loadtest/cprofile_serve.py), and the functions that took the most of it are listed per checkout
at the end (their split, not their real cost: the profiler's own cost per call inflates every
figure, the CPU µs per request too).
"""

from __future__ import annotations

import argparse
import os
import pstats
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from inferpool.harness.payloads import Payload, digits_json, digits_v2_json
from inferpool.harness.procs import tree_run_seconds
from inferpool.harness.server import Command, Server, inferpool_serve, launch, python_module
from loadtest.bench import case_parser
from loadtest.bench.new_images import new_images_lua
from loadtest.cprofile_serve import DIRECTORY
from loadtest.wrk import WRK

BODIES = {"v2-json": digits_v2_json, "predict": digits_json, "predict-new": digits_json}
NEW_EACH_TIME = {"predict-new"}
"""Bodies whose script makes every request anew (``new_images_lua``) from the payload's path and headers."""
ROOT = Path(__file__).resolve().parents[2]
SETTLE_SECONDS = 0.5
"""After wrk stops: the answers still in flight when it closed its connections are counted too."""
STOP_AFTER = """
local answered = 0
response = function(status, headers, body)
  answered = answered + 1
  if answered == {requests} then
    io.write("STOPPED\\n")
    io.flush()
    wrk.thread:stop()
  end
end
"""
STOPPED = "STOPPED"
"""What the script prints when it stops: wrk itself would sleep out its duration, so it is interrupted
(SIGINT ends wrk's sleep; it then prints its summary)."""


def lua_script(payload: Payload, requests: int, directory: Path, new_each_time: bool = False) -> Path:
    """wrk's script: ``payload`` on every connection (with ``new_each_time`` its path and headers,
    each request a new image), stopping after ``requests`` answers."""
    body = directory / f"{abs(hash(payload.body))}.bin"
    body.write_bytes(payload.body)
    lines = [f'local f = io.open("{body}", "rb")', f'wrk.method = "{payload.method}"', "wrk.body = f:read('*a')"]
    lines += ["f:close()", *(f'wrk.headers["{name}"] = "{value}"' for name, value in payload.headers)]
    if new_each_time:
        lines.append(new_images_lua())
    path = body.with_suffix(f".{requests}{'.new' if new_each_time else ''}.lua")
    path.write_text("\n".join(lines) + STOP_AFTER.format(requests=requests))
    return path


def answered(server: Server, payload: Payload, script: Path, connections: int, seconds: int) -> int:
    """One wrk run against ``server``: the 2xx answers it counted (it fails on any other)."""
    argv = [WRK, "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(script)]
    with subprocess.Popen([*argv, server.url + payload.path], stdout=subprocess.PIPE, text=True) as wrk:
        assert wrk.stdout is not None
        lines = []
        for line in wrk.stdout:
            lines.append(line)
            if line.strip() == STOPPED:
                wrk.send_signal(signal.SIGINT)
        if wrk.wait() != 0:
            raise RuntimeError(f"wrk failed ({wrk.returncode}):\n{''.join(lines)}")
    out = "".join(lines)
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"{server.name}: errors under load:\n{out}")
    for line in out.splitlines():
        words = line.split()
        if len(words) > 1 and words[1] == "requests" and words[0].isdigit():  # "20000 requests in 2.1s, ..."
            return int(words[0])
    raise RuntimeError(f"wrk printed no request count:\n{out}")


def cpu_us_per_request(server: Server, payload: Payload, script: Path, connections: int, seconds: int) -> float:
    pid = server.process.pid
    before = tree_run_seconds(pid)
    count = answered(server, payload, script, connections, seconds)
    time.sleep(SETTLE_SECONDS)
    return (tree_run_seconds(pid) - before - SETTLE_SECONDS * idle_cpu(server)) / count * 1e6


_idle: dict[int, float] = {}


def idle_cpu(server: Server) -> float:
    """The tree's CPU seconds per second with no load (its timers, the supervisor's checks)."""
    pid = server.process.pid
    if pid not in _idle:
        before = tree_run_seconds(pid)
        time.sleep(2.0)
        _idle[pid] = (tree_run_seconds(pid) - before) / 2.0
    return _idle[pid]


def checkout_option(parser: argparse.ArgumentParser) -> None:
    """``--checkout NAME=PATH``, repeatable: the trees whose servers a case compares."""
    parser.add_argument(
        "--checkout", action="append", default=[], metavar="NAME=PATH",
        help="a tree to serve from (PYTHONPATH=PATH); repeat for an A/B; default: this checkout",
    )  # fmt: skip


def serve_checkouts(
    stack: ExitStack, checkouts: list[str], scratch: Path, profile: Path | None = None, settings: Sequence[str] = ()
) -> dict[str, Server]:
    """A no-flag server for each ``--checkout`` and one of this checkout for each ``--serve``
    (``settings``; with neither, this checkout's no-flag server), all at once, stopped with ``stack``."""
    servers = {}
    served = {name: (path, "") for name, path in (item.split("=", 1) for item in checkouts)}
    served |= {name: (str(ROOT), flags) for name, flags in (item.split("=", 1) for item in settings)}
    for name, (path, flags) in (served or {"this": (str(ROOT), "")}).items():
        command, env = serve_command(profile, name, shlex.split(flags))
        env["PYTHONPATH"] = str(Path(path).resolve())
        # Started outside every checkout: ``python -m`` puts its working directory first on the
        # path, so from a checkout's root every server would import that checkout's inferpool.
        servers[name] = stack.enter_context(launch(command, name=name, env=env, cwd=scratch))
    return servers


def http_cpu_parser() -> argparse.ArgumentParser:
    parser = case_parser("http_cpu", __doc__)
    checkout_option(parser)
    parser.add_argument(
        "--serve", action="append", default=[], metavar="NAME=FLAGS",
        help="this checkout served with these `inferpool serve` flags; repeat for an A/B of settings",
    )  # fmt: skip
    parser.add_argument("--body", action="append", choices=sorted(BODIES), help="default: v2-json and predict")
    parser.add_argument("--requests", type=int, default=20_000, help="answers per run")
    parser.add_argument("--warmup", type=int, default=3_000, help="answers before each run, not measured")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-seconds", type=int, default=120, help="a run's cap, should the server stall")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="serve under cProfile, its files in DIR/<checkout>")
    parser.add_argument("--top", type=int, default=40, help="with --profile: the functions listed per checkout")
    return parser


def serve_command(profile: Path | None, name: str, flags: Sequence[str] = ()) -> tuple[Command, dict[str, str]]:
    """How a checkout is served: ``inferpool serve [flags]``, or under cProfile into ``profile/name``."""
    if profile is None:
        return inferpool_serve(*flags, program=(sys.executable, "-m", "inferpool")), {}
    program = (sys.executable, "-m", "loadtest.cprofile_serve")
    return inferpool_serve(*flags, program=program), {DIRECTORY: str((profile / name).resolve())}


def print_profile(directory: Path, name: str, top: int) -> None:
    """The ``top`` functions by their own thread CPU, summed over the checkout's serving processes."""
    files = sorted(map(str, directory.glob("serving-*.prof")))
    if not files:
        print(f"{name}: no profile in {directory} (did the serving processes stop cleanly?)")
        return
    print(f"\n{name}: own thread CPU by function, {len(files)} serving processes ({directory})")
    pstats.Stats(*files).sort_stats("tottime").print_stats(top)


def fronts_parser() -> argparse.ArgumentParser:
    parser = case_parser("fronts", __doc__)
    parser.add_argument("--granian", type=Path, metavar="DIR", help="where granian is installed (pip --target)")
    parser.add_argument("--requests", type=int, default=20_000, help="answers per run")
    parser.add_argument("--warmup", type=int, default=3_000, help="answers before each run, not measured")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-seconds", type=int, default=120, help="a run's cap, should the server stall")
    return parser


def _granian(interface: str, app: str) -> Command:
    return lambda port: [
        sys.executable, "-m", "granian", "--interface", interface, "--workers", "2", "--loop", "uvloop",
        "--no-ws", "--log-level", "warning", "--host", "127.0.0.1", "--port", str(port), app,
    ]  # fmt: skip


GRANIAN_FRONTS = {
    "granian asgi": _granian("asgi", "loadtest.peers.bare_handler:app"),
    "granian rsgi": _granian("rsgi", "loadtest.peers.bare_fronts:rsgi_app"),
}


def front_commands(granian: Path | None) -> dict[str, tuple[Command, dict[str, str], str]]:
    """Each front end: its command, its environment and its readiness path."""
    from loadtest.peers.bare_handler import ONNX_ENV, export

    bare = {ONNX_ENV: export()}  # the workers load the file; torch only here, once
    fronts: dict[str, tuple[Command, dict[str, str], str]] = {
        "uvicorn asgi": (python_module("loadtest.peers.bare_handler"), bare, "/"),
        "plain protocol": (python_module("loadtest.peers.bare_fronts"), bare, "/"),
    }
    if granian is not None:
        path = os.pathsep.join([str(granian.resolve()), str(ROOT), os.environ.get("PYTHONPATH", "")])
        fronts |= {name: (command, bare | {"PYTHONPATH": path}, "/") for name, command in GRANIAN_FRONTS.items()}
    fronts["inferpool"] = (inferpool_serve(program=(sys.executable, "-m", "inferpool")), {}, "/health/ready")
    return fronts


def fronts(argv: list[str] | None = None) -> dict[str, list[float]]:
    """CPU µs per /predict request of each round, by front end."""
    args = fronts_parser().parse_args(argv)
    if args.granian is None:
        print("granian left out: pip install --target DIR granian, then --granian DIR")
    payload = digits_json()
    found: dict[str, list[float]] = {}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        servers = {
            name: stack.enter_context(launch(command, name=name, env=env, ready_path=ready))
            for name, (command, env, ready) in front_commands(args.granian).items()
        }
        warmup, measured = (lua_script(payload, count, Path(scratch)) for count in (args.warmup, args.requests))
        for round_ in range(args.rounds):
            for name, server in list(servers.items())[:: 1 if round_ % 2 == 0 else -1]:
                idle_cpu(server)
                answered(server, payload, warmup, args.connections, args.max_seconds)
                us = cpu_us_per_request(server, payload, measured, args.connections, args.max_seconds)
                found.setdefault(name, []).append(us)
                print(f"round {round_ + 1} {name:15s} {us:7.1f} µs/request", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"/predict, server tree CPU µs per request, {args.connections} connections, median (min-max):")
    for name, values in found.items():
        print(f"  {name:15s} {statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})")
    return found


def http_cpu(argv: list[str] | None = None) -> dict[str, dict[str, list[float]]]:
    """CPU µs per request of each round, by body and checkout."""
    args = http_cpu_parser().parse_args(argv)
    bodies = {name: BODIES[name]() for name in args.body or ("v2-json", "predict")}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        servers = serve_checkouts(stack, args.checkout, Path(scratch), args.profile, args.serve)
        found: dict[str, dict[str, list[float]]] = {body: {name: [] for name in servers} for body in bodies}
        # A body made anew each request gets a new script each run: no run repeats another's requests.
        fixed = {
            (body, count): lua_script(payload, count, Path(scratch))
            for body, payload in bodies.items()
            for count in (args.warmup, args.requests)
        }

        def script(body: str, count: int) -> Path:
            if body in NEW_EACH_TIME:
                return lua_script(bodies[body], count, Path(scratch), new_each_time=True)
            return fixed[body, count]

        for round_ in range(args.rounds):
            order = list(servers.items())[:: 1 if round_ % 2 == 0 else -1]
            for body, payload in bodies.items():
                for name, server in order:
                    idle_cpu(server)
                    run = (server, payload)
                    answered(*run, script(body, args.warmup), args.connections, args.max_seconds)
                    us = cpu_us_per_request(*run, script(body, args.requests), args.connections, args.max_seconds)
                    found[body][name].append(us)
                    print(f"round {round_ + 1} {body:8s} {name:10s} {us:7.1f} µs/request", flush=True)
    print_medians(
        f"server tree CPU µs per request, {args.connections} connections, median (min-max) of {args.rounds} rounds:",
        {f"{body:8s} {name:10s}": values for body, rows in found.items() for name, values in rows.items()},
    )
    if args.profile is not None:
        for name in servers:
            print_profile(args.profile / name, name, args.top)
    return found


def print_medians(title: str, figures: dict[str, list[float]]) -> None:
    """The load average, ``title``, then each figure's median (min-max) over its rounds, a line each."""
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(title)
    for label, values in figures.items():
        print(f"  {label} {statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})")
