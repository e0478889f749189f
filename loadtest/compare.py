"""InferPool side by side with the alternatives: same model, same weights, same load, one run.

    python -m loadtest.compare [--workload digits|minilm1|minilm16|resnet50]
                               [--duration 6 --warmup 2] [--concurrency 1,8,64] [--pin]
                               [--generator python|wrk] [--rounds N]
                               [--only NAME,...] [--litserve-python /tmp/venv-litserve/bin/python]
                               [--triton-python .venv-triton/bin/python]
                               [--out DIR]

With ``--workload`` other than digits, the variants are those of ``loadtest.workloads``: InferPool
with no flags (and in one process) against the plain FastAPI server of that model at 1 and 2
processes of 1 and 2 torch threads (``loadtest.peers.fastapi_models``), at the workload's own
concurrencies. Every table starts with the bare engine's rate measured first, in a child process
that exits before any server starts (the physical limit; loadtest/apart.py says why not in this
one: the trees' PSS), and ends with InferPool's ratio to it and to the best peer at each concurrency.

For digits, each variant serves ``inferpool.engine.zoo.digits:build`` on a free 127.0.0.1 port and gets the same
closed-loop sweep (one JSON digit per ``POST /predict`` unless the variant says otherwise), from
``loadtest.openloop`` or, with ``--generator wrk``, from Debian's wrk (``loadtest.wrk``: a
fraction of the client CPU per request): InferPool eager, eager + dynamic batching (8),
onnxruntime, onnxruntime with v2 binary tensors, onnxruntime with inline dispatch, ``--workers 2``
(eager and onnxruntime), one variant for each further backend in ``engine.BACKENDS``; the limit
(``loadtest.peers.bare_handler``: a bare ASGI function, orjson, the same ONNX export through
onnxruntime inline, 2 processes; when it ran, a second table gives every variant as a multiple of
it: ``--only "InferPool defaults,limit" --generator wrk`` is issue 32's ratio); the FastAPI
baseline (``loadtest.peers.fastapi_baseline``); LitServe 1 and 2 workers, batching off and 8
(``loadtest.peers.litserve_digits``) when ``--litserve-python`` points at a venv that has
``litserve`` and torch (create it as that file's docstring says); Triton 2.51 on the v2 JSON body
beside InferPool's no-flag server on the same body, when ``--triton-python`` exists (``make
.venv-triton``; ``loadtest.compare_triton``), with InferPool's ratios to it. Variants start one at a time
(never two servers at once); ``--rounds N`` repeats the list N times, alternating its order, and
each table cell shows the round with the best throughput (``--pick median`` for the median);
``all_runs.json`` keeps every round, and ``--tables-from all_runs.json`` redraws from it.

Reported per concurrency: achieved req/s, p50/p99 ms; per variant: the largest RSS of the whole
server process tree seen after each run (sum of VmRSS, /proc), its PSS after the sweep (shared
pages divided among their sharers: what the tree holds), the server's CPU (cores) and the
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
from pathlib import Path
from typing import Any

from inferpool.engine import BACKENDS
from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import REPO_ROOT, Command, inferpool_serve, launch
from loadtest import openloop, wrk
from loadtest.compare_triton import TRITON_PYTHON, V2_DEFAULTS, against_triton, triton_variant
from loadtest.procs import tree_pss_bytes
from loadtest.workloads import WORKLOADS, Variant, limits_apart, variants_for

LIMIT = "bare handler limit, 2 processes"
DEFAULTS = "InferPool defaults"
SEEN = ("eager", "onnxruntime")  # backends with their own variants above; newer ones get one each


def variants(litserve_python: str | None, triton_python: str | None = None) -> list[Variant]:
    ip = inferpool_serve

    def baseline(workers: int) -> Command:
        module = "loadtest.peers.fastapi_baseline"
        return lambda port: [sys.executable, "-m", module, "--port", str(port), "--workers", str(workers)]

    found = [
        Variant("InferPool defaults", ip()),
        Variant(V2_DEFAULTS, ip(), payload="digits-v2-json"),
        Variant("InferPool 1 process", ip("--workers", "1")),
        # The defaults before issue 14: eager on worker threads.
        Variant("InferPool eager", ip("--runtime.backend", "eager", "--runtime.dispatch", "threads")),
        Variant("InferPool eager batch8", ip("--runtime.backend", "eager", "--runtime.max-batch-size", "8")),
        Variant("InferPool onnxruntime", ip("--runtime.backend", "onnxruntime")),
        Variant("InferPool onnx v2-binary", ip("--runtime.backend", "onnxruntime"), payload="digits-v2-binary"),
        Variant("InferPool eager workers2", ip("--runtime.backend", "eager", "--workers", "2")),
        Variant("InferPool onnx workers2", ip("--runtime.backend", "onnxruntime", "--workers", "2")),
        Variant("InferPool onnx inline", ip("--runtime.backend", "onnxruntime", "--runtime.dispatch", "inline")),
        *(Variant(f"InferPool {name}", ip("--runtime.backend", name)) for name in sorted(BACKENDS) if name not in SEEN),
        # The floor: one ASGI function, orjson, the same auto-chosen model called inline (no
        # validation, admission, metrics or middleware): what InferPool's own machinery is measured against.
        Variant(
            "bare ASGI reference",
            lambda port: [
                sys.executable,
                "-m",
                "inferpool.service.bench_reference",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
        ),
        # The limit (issue 32): one ASGI function, orjson, InferPool's own ONNX export called inline
        # through onnxruntime on one thread, 2 processes; ``--only "defaults,limit"`` is the ratio.
        Variant(LIMIT, lambda port: [sys.executable, "-m", "loadtest.peers.bare_handler", "--port", str(port)]),
        Variant("FastAPI baseline", baseline(1)),
        Variant("FastAPI baseline workers2", baseline(2)),
    ]
    if litserve_python and Path(litserve_python).exists():
        script = str(REPO_ROOT / "loadtest" / "peers" / "litserve_digits.py")

        def litserve(workers: int, batch: int) -> Command:
            extra = ["--workers", str(workers), "--max-batch-size", str(batch)]
            return lambda port: [litserve_python, script, "--port", str(port), *extra]

        for workers in (1, 2):
            for batch in (1, 8):
                name = f"LitServe {workers} worker{'s' if workers > 1 else ''}" + (
                    f" batch{batch}" if batch > 1 else ""
                )
                found.append(Variant(name, litserve(workers, batch), ready_path="/health"))
    if triton_python and Path(triton_python).exists():
        found.append(triton_variant(triton_python))
    return found


def run_variant(
    variant: Variant, concurrency: list[int], pin: bool, log_dir: Path, generator: str = "python", **options: Any
) -> list[dict[str, Any]]:
    previous = os.sched_getaffinity(0)
    runs = []
    with launch(
        variant.argv, log_dir, name=variant.name, ready_path=variant.ready_path, cpus=[1] if pin else None,
        env=variant.env,
    ) as server:  # fmt: skip
        if pin:
            os.sched_setaffinity(0, {0})
        try:
            payload = PAYLOADS[variant.payload]()
            for c in concurrency:
                if generator == "wrk":
                    run = wrk.run_one(server.url, payload, c, label=variant.name, server_pid=server.process.pid,
                                      scratch=log_dir, **options)  # fmt: skip
                else:
                    config = openloop.RunConfig(server.url, payload, concurrency=c, label=variant.name, **options)
                    run = openloop.run_one(config, server.process.pid)
                run["pinned"] = pin
                runs.append(run)
                print(openloop.brief(run), f" server {run['server_cpu_cores']} cores {run['server_rss_mb']} MB",
                      flush=True)  # fmt: skip
        finally:
            os.sched_setaffinity(0, previous)
        pss_mb = round(tree_pss_bytes(server.process.pid) / 2**20, 1)
    return [{**run, "server_pss_mb": pss_mb} for run in runs]


def pick_runs(runs: list[dict[str, Any]], pick: str = "best") -> list[dict[str, Any]]:
    """Per variant and concurrency, one run of its rounds: ``best`` (highest throughput: other
    load on the machine only ever slows a run down, so the fastest round is the least disturbed)
    or ``median`` (the lower middle one for an even count); first-seen order, with every
    round's throughput beside it."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["label"], run["concurrency"]), []).append(run)
    chosen = []
    for group in groups.values():
        ordered = sorted(group, key=lambda r: r["achieved_rps"])
        one = ordered[-1] if pick == "best" else ordered[(len(ordered) - 1) // 2]
        chosen.append({**one, "rounds_rps": [r["achieved_rps"] for r in group], "picked": pick})
    return chosen


def table(runs: list[dict[str, Any]], concurrency: list[int]) -> str:
    head = "| server | " + " | ".join(f"c={c} req/s | c={c} p50 / p99 ms" for c in concurrency)
    head += " | RSS MB (tree) | PSS MB (tree) | server CPU cores | server CPU ms/req | generator CPU cores |"
    rows = [head, "|" + "---|" * (1 + 2 * len(concurrency) + 5)]
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
            rps = one["achieved_rps"]
            shown = f"{rps:,.0f}" if rps >= 100 else f"{rps:.1f}"
            cells += [shown + (f" ({bad} err)" if bad else ""), f"{lat['p50']} / {lat['p99']}"]
        cells.append(f"{max(r['server_rss_mb'] for r in group.values()):,.0f}")
        cells.append(f"{max(r.get('server_pss_mb', 0) for r in group.values()):,.0f}")  # 0: runs from before it
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


def limit_line(limit: dict[str, Any]) -> str:
    engine = limit.get("engine", "onnxruntime")  # runs recorded before the limit said its engine
    return (f"bare engine (no HTTP, {engine}) {limit['one_stream']} req/s one stream on every core, "
            f"{limit['every_core']} with every core busy")  # fmt: skip


def ratios(runs: list[dict[str, Any]], limit: dict[str, Any]) -> str:
    """InferPool's no-flag server against the best peer at each concurrency, and against the limit
    (one stream at one connection, every core busy above)."""
    rates: dict[tuple[str, int], float] = {(r["label"], r["concurrency"]): r["achieved_rps"] for r in runs}
    lines = []
    for c in sorted({c for _, c in rates}):
        ours = rates.get((DEFAULTS, c))
        peers = {
            name: rps
            for (name, at), rps in rates.items()
            if at == c and not name.startswith("InferPool") and name != LIMIT  # the limit is no peer
        }
        if ours is None:
            continue
        bound = limit["one_stream"] if c == 1 else limit["every_core"]
        line = f"c={c}: defaults {ours:,.1f} req/s = {ours / bound:.2f}x the limit"
        if peers:
            best = max(peers, key=peers.__getitem__)
            line += f", {ours / max(peers[best], 1e-9):.2f}x the best peer ({best}, {peers[best]:,.1f})"
        lines.append(line)
    return "\n".join(lines)


def by_round(runs: list[dict[str, Any]], round_limits: list[dict[str, Any]]) -> str:
    """The no-flag server against the limit measured just before its round, round by round (issue
    29's "in every one of 5 runs")."""
    lines = []
    for round_, limit in enumerate(round_limits):
        ours = {r["concurrency"]: r["achieved_rps"] for r in runs if r["round"] == round_ and r["label"] == DEFAULTS}
        cells = [
            f"c={c} {rps / (limit['one_stream'] if c == 1 else limit['every_core']):.2f}x"
            for c, rps in sorted(ours.items())
        ]
        lines.append(f"round {round_ + 1} (limit {limit['one_stream']} / {limit['every_core']}): " + ", ".join(cells))
    return "\n".join(lines)


def against_limit(runs: list[dict[str, Any]], concurrency: list[int]) -> str:
    """Each variant's req/s, p99 and server CPU per request as a multiple of the limit row's (empty
    without that row): issue 32's goals are >= 0.8x its req/s, <= 1.5x its p99 at 64 connections
    and <= 1.4x its CPU per request."""
    by_name: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        by_name.setdefault(run["label"], {})[run["concurrency"]] = run
    limit = by_name.get(LIMIT)
    if not limit:
        return ""

    def cpu(run: dict[str, Any]) -> float:
        return float(run["server_cpu_cores"]) / max(float(run["achieved_rps"]), 1e-9)

    head = "| server (x the limit) | " + " | ".join(f"c={c} req/s | c={c} p99 | c={c} CPU/req" for c in concurrency)
    rows = [head + " |", "|" + "---|" * (1 + 3 * len(concurrency))]
    for name, group in by_name.items():
        cells = [name]
        for c in concurrency:
            one, base = group.get(c), limit.get(c)
            if one is None or base is None:
                cells += ["-", "-", "-"]
                continue
            cells += [
                f"{one['achieved_rps'] / max(base['achieved_rps'], 1e-9):.2f}",
                f"{one['latency_ms']['p99'] / max(base['latency_ms']['p99'], 1e-9):.2f}",
                f"{cpu(one) / max(cpu(base), 1e-12):.2f}",
            ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the running server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="digits",
                        help="what is served and sent (loadtest.workloads); digits has its own peers")  # fmt: skip
    parser.add_argument("--concurrency", default=None, help="default: the workload's (digits 1,8,64)")
    parser.add_argument("--pin", action="store_true", help="server on CPU 1, generator on CPU 0")
    parser.add_argument("--only", default="", help="comma-separated variant names (substring match)")
    parser.add_argument("--litserve-python", default="/tmp/venv-litserve/bin/python")
    parser.add_argument("--triton-python", default=str(TRITON_PYTHON), help="the Triton venv's (make .venv-triton)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=1, help="repeat every variant, alternating the order")
    parser.add_argument("--pick", choices=("best", "median"), default="best", help="which round a table cell shows")
    parser.add_argument("--tables-from", type=Path, default=None, help="an earlier all_runs.json: no new runs")
    parser.add_argument(
        "--limit-each-round", action="store_true",
        help="measure the bare engine again before every round: each round's ratio to its own limit",
    )  # fmt: skip
    parser.add_argument(
        "--generator", choices=("python", "wrk"), default="python",
        help="closed-loop client: loadtest.openloop (Python) or Debian's wrk (less CPU per request)",
    )  # fmt: skip
    args = parser.parse_args()
    workload = WORKLOADS[args.workload]
    concurrency = [int(c) for c in args.concurrency.split(",")] if args.concurrency else list(workload.concurrency)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"inferpool-compare-{time.strftime('%H%M%S')}-"))
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    if args.tables_from:  # tables and plots again from an earlier run's every round
        runs = json.loads(args.tables_from.read_text())
        concurrency = sorted({run["concurrency"] for run in runs})
    digits = args.workload == "digits"
    chosen = variants(args.litserve_python, args.triton_python) if digits else variants_for(args.workload)
    if args.tables_from:
        limit = json.loads((args.tables_from.parent / "limit.json").read_text())
    else:  # before any server: the bare engine's own rate is the physical limit (apart: its
        # libraries mapped here would keep the supervisor's loading code resident, loadtest/apart.py)
        limit = limits_apart(args.workload, min(args.duration, 5.0))
        (out / "limit.json").write_text(json.dumps(limit))
    if args.only:
        wanted = [w.strip().lower() for w in args.only.split(",")]
        chosen = [v for v in chosen if any(w in v.name.lower() for w in wanted)]
    round_limits: list[dict[str, Any]] = []
    for round_ in range(0 if args.tables_from else args.rounds):
        if args.limit_each_round:  # a machine that drifts within the run: each round beside its own limit
            round_limits.append(limit if round_ == 0 else limits_apart(args.workload, min(args.duration, 5.0)))
            (out / "round_limits.json").write_text(json.dumps(round_limits))
        # Each round in the opposite order, so that slow drift (other load on the machine) does
        # not always favour the same variants.
        for variant in chosen if round_ % 2 == 0 else chosen[::-1]:
            try:
                found = run_variant(
                    variant, concurrency, args.pin, out, args.generator, duration=args.duration, warmup=args.warmup
                )
            except (RuntimeError, TimeoutError) as exc:
                print(f"{variant.name}: failed to start: {str(exc)[:2000]}", flush=True)
                continue
            runs += [{**run, "round": round_} for run in found]
            (out / "all_runs.json").write_text(json.dumps(runs, indent=1))  # kept if the run is cut short
    picked = pick_runs(runs, args.pick)
    text = f"{args.workload}: {limit_line(limit)}\n\n" + table(picked, concurrency) + "\n\n" + ratios(picked, limit)
    suffix = " pinned" if args.pin else ""
    openloop.write_results(picked, out, f"{args.workload}, closed loop{suffix}")
    if round_limits:
        text += "\n\n" + by_round(runs, round_limits)
    against = against_limit(picked, concurrency)
    if against:
        text += "\n\n" + against
    if triton := against_triton(picked):
        text += "\n\n" + triton
    (out / "table.md").write_text(text + "\n")
    print(text)
    print(json.dumps({"results": str(out)}))


if __name__ == "__main__":
    main()
