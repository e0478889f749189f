"""InferPool side by side with the alternatives: same model, same weights, same load, one run.

    python -m loadtest.compare [--duration 6 --warmup 2] [--concurrency 1,8,64] [--pin]
                               [--only NAME,...] [--litserve-python /tmp/venv-litserve/bin/python]
                               [--out DIR]

Each variant serves ``engine.zoo.digits:build`` on a free 127.0.0.1 port and gets the same
closed-loop sweep from ``loadtest.openloop`` (one JSON digit per ``POST /predict`` unless the
variant says otherwise): InferPool eager, eager + dynamic batching (8), onnxruntime, onnxruntime
with v2 binary tensors, ``--workers 2``; the FastAPI baseline (``loadtest.peers.fastapi_baseline``);
LitServe 1 and 2 workers (``loadtest.peers.litserve_digits``) when ``--litserve-python`` points
at a venv that has ``litserve`` and torch. Variants start one at a time (never two servers at once).

Reported per concurrency: achieved req/s, p50/p99 ms; per variant: the largest RSS of the whole
server process tree seen after each run (sum of VmRSS, /proc), the server's CPU (cores) and the
generator's own CPU. Without ``--pin`` the generator and the server share both cores (the
generator's CPU is then load the server does not get); with ``--pin`` the server is confined to
CPU 1 (``taskset``) and the generator to CPU 0. Prints a Markdown table; writes ``runs.json``,
``table.md`` and the PNGs to ``--out`` (default: a new directory under /tmp).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest import openloop
from loadtest.procs import free_port, inferpool_argv, launch
from loadtest.server import REPO_ROOT


@dataclass
class Variant:
    name: str
    argv: Callable[[int], list[str]]
    payload: str = "digits-json"
    ready_path: str = "/health/ready"
    env: dict[str, str] | None = None


def variants(litserve_python: str | None) -> list[Variant]:
    def ip(*args: str) -> Callable[[int], list[str]]:
        return lambda port: inferpool_argv(port, *args)

    found = [
        Variant("InferPool eager", ip()),
        Variant("InferPool eager batch8", ip("--runtime.max-batch-size", "8")),
        Variant("InferPool onnxruntime", ip("--runtime.backend", "onnxruntime")),
        Variant("InferPool onnx v2-binary", ip("--runtime.backend", "onnxruntime"), payload="digits-v2-binary"),
        Variant("InferPool eager workers2", ip("--workers", "2")),
        Variant(
            "FastAPI baseline",
            lambda port: [sys.executable, "-m", "loadtest.peers.fastapi_baseline", "--port", str(port)],
        ),
    ]
    if litserve_python and Path(litserve_python).exists():
        script = str(REPO_ROOT / "loadtest" / "peers" / "litserve_digits.py")

        def litserve(workers: int) -> Callable[[int], list[str]]:
            return lambda port: [litserve_python, script, "--port", str(port), "--workers", str(workers)]

        for workers in (1, 2):
            name = f"LitServe {workers} worker{'s' if workers > 1 else ''}"
            found.append(Variant(name, litserve(workers), ready_path="/health"))
    return found


def run_variant(
    variant: Variant, concurrency: list[int], pin: bool, log_dir: Path, **options: Any
) -> list[dict[str, Any]]:
    port = free_port()
    previous = os.sched_getaffinity(0)
    runs = []
    with launch(
        variant.name, variant.argv(port), log_dir, port=port, ready_path=variant.ready_path,
        cpus=[1] if pin else None, env=variant.env,
    ) as server:  # fmt: skip
        if pin:
            os.sched_setaffinity(0, {0})
        try:
            payload = openloop.PAYLOADS[variant.payload]()
            for c in concurrency:
                config = openloop.RunConfig(server.url, payload, concurrency=c, label=variant.name, **options)
                run = openloop.run_one(config, server.process.pid)
                run["pinned"] = pin
                runs.append(run)
                print(openloop.brief(run), f" server {run['server_cpu_cores']} cores {run['server_rss_mb']} MB",
                      flush=True)  # fmt: skip
        finally:
            os.sched_setaffinity(0, previous)
    return runs


def table(runs: list[dict[str, Any]], concurrency: list[int]) -> str:
    head = "| server | " + " | ".join(f"c={c} req/s | c={c} p50 / p99 ms" for c in concurrency)
    head += " | RSS MB (tree) | server CPU cores | server CPU ms/req | generator CPU cores |"
    rows = [head, "|" + "---|" * (1 + 2 * len(concurrency) + 4)]
    by_name: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        by_name.setdefault(run["label"], {})[run["concurrency"]] = run
    for name, group in by_name.items():
        cells = [name]
        for c in concurrency:
            one = group.get(c)
            if one is None:
                cells += ["-", "-"]
                continue
            lat = one["latency_ms"]
            bad = one["connection_errors"] + one["rejected_503"] + sum(one["other_status"].values())
            cells += [f"{one['achieved_rps']:,.0f}" + (f" ({bad} err)" if bad else ""), f"{lat['p50']} / {lat['p99']}"]
        cells.append(f"{max(r['server_rss_mb'] for r in group.values()):,.0f}")
        cells.append(" / ".join(f"{group[c]['server_cpu_cores']:.2f}" for c in concurrency if c in group))
        cells.append(
            " / ".join(
                f"{group[c]['server_cpu_cores'] / max(group[c]['achieved_rps'], 1e-9) * 1e3:.2f}"
                for c in concurrency
                if c in group
            )
        )
        cells.append(" / ".join(f"{group[c]['generator_cpu']['cores']:.2f}" for c in concurrency if c in group))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the running server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--pin", action="store_true", help="server on CPU 1, generator on CPU 0")
    parser.add_argument("--only", default="", help="comma-separated variant names (substring match)")
    parser.add_argument("--litserve-python", default="/tmp/venv-litserve/bin/python")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix=f"inferpool-compare-{time.strftime('%H%M%S')}-"))
    out.mkdir(parents=True, exist_ok=True)
    chosen = variants(args.litserve_python)
    if args.only:
        wanted = [w.strip().lower() for w in args.only.split(",")]
        chosen = [v for v in chosen if any(w in v.name.lower() for w in wanted)]
    runs: list[dict[str, Any]] = []
    for variant in chosen:
        try:
            runs += run_variant(variant, concurrency, args.pin, out, duration=args.duration, warmup=args.warmup)
        except (RuntimeError, TimeoutError) as exc:
            print(f"{variant.name}: failed to start: {str(exc)[:2000]}", flush=True)
    text = table(runs, concurrency)
    suffix = " pinned" if args.pin else ""
    openloop.write_results(runs, out, f"digits CNN, closed loop{suffix}")
    (out / "table.md").write_text(text + "\n")
    print(text)
    print(json.dumps({"results": str(out)}))


if __name__ == "__main__":
    main()
