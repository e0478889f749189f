"""Backends: per-call latency and 2-thread scaling of each (``backends``), what ``auto`` picks and how
stably (``auto``), what the defaults choose on this machine and what choosing costs (``defaults``).

    python -m loadtest.bench backends [--rounds N] [--calls N]
    python -m loadtest.bench auto [--model SOURCE ...] [--backends eager,onnxruntime] [--repeats 3]
    python -m loadtest.bench defaults [--models digits,mlp] [--repeats 2] [--startup MODEL BACKEND]

``backends``:

All rows run in one process, interleaved round by round, so that machine noise hits every
row alike. One intra-op thread everywhere (as the service runs by default). Each backend
builds its shared artifact once (``Runtime.compile``) and one runtime per thread.

- latency: median microseconds per ``runtime.run`` over every call of every round; the
  bracket is the range of the per-round medians (how noisy the machine was).
- scaling: calls/s of 2 threads, each with its own runtime on the shared module/session,
  over calls/s of 1 thread; 2.0 is perfect on 2 cores, 1.0 means the GIL (or a lock)
  serialises the calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import warnings
from collections import Counter

import numpy as np
import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions, load_model
from inferpool.engine.backends import AUTO
from inferpool.engine.backends.autoselect import format_table, resolve_backend
from inferpool.engine.backends.base import Runtime
from inferpool.engine.plan.dispatch_choice import decide
from inferpool.engine.plan.threads import ThreadPlan, apply_thread_plan, init_worker_thread, plan_threads
from inferpool.engine.zoo.digits import build
from loadtest.bench import case_parser

BATCHES = (1, 32)
PLAN = ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1)


def latencies(runtime: Runtime, inputs: dict[str, np.ndarray], calls: int) -> list[float]:
    run, clock = runtime.run, time.perf_counter
    times = []
    for _ in range(calls):
        started = clock()
        run(inputs)
        times.append(clock() - started)
    return times


def throughput(runtimes: list[Runtime], inputs: dict[str, np.ndarray], calls: int) -> float:
    """Calls per second of len(runtimes) threads, each running ``calls`` calls on its own runtime."""
    barrier = threading.Barrier(len(runtimes) + 1)

    def work(runtime: Runtime) -> None:
        init_worker_thread(PLAN)  # torch's thread count is per thread
        barrier.wait()
        for _ in range(calls):
            runtime.run(inputs)

    threads = [threading.Thread(target=work, args=(r,)) for r in runtimes]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return len(runtimes) * calls / (time.perf_counter() - started)


def span(values: list[float], digits: int) -> str:
    return f"({min(values):.{digits}f}-{max(values):.{digits}f})"


def backends_parser() -> argparse.ArgumentParser:
    parser = case_parser("backends", __doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=400, help="calls per row per round (batch 1; batch 32 runs 1/8)")
    parser.add_argument("--backends", default="eager,onnxruntime,torchscript", help="comma-separated rows")
    return parser


def backends(argv: list[str] | None = None) -> dict[tuple[str, int], dict[str, float]]:
    args = backends_parser().parse_args(argv)
    apply_thread_plan(PLAN)
    torch.set_num_threads(1)

    module = InferenceModule.from_spec(build())
    options = RuntimeOptions(intra_op_threads=1)
    runtimes: dict[str, list[Runtime]] = {}
    for name in args.backends.split(","):
        backend = BACKENDS[name]
        started = time.perf_counter()
        compiled = backend.compile(module, options)
        print(f"{name}: compile {time.perf_counter() - started:.2f} s")
        runtimes[name] = [backend(module, options, compiled) for _ in range(2)]
        for runtime in runtimes[name]:
            runtime.warmup()

    rng = np.random.default_rng(0)
    inputs = {b: {"image": rng.integers(0, 17, size=(b, 1, 8, 8)).astype(np.float32)} for b in BATCHES}
    rows = [(name, b) for b in BATCHES for name in runtimes]
    samples: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    round_medians: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    ratios: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    single: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    for _ in range(args.rounds):
        for name, b in rows:
            calls = args.calls if b == 1 else max(1, args.calls // 8)
            pair = runtimes[name]
            times = latencies(pair[0], inputs[b], calls)
            samples[name, b] += times
            round_medians[name, b].append(statistics.median(times))
            one = throughput(pair[:1], inputs[b], calls)
            two = throughput(pair, inputs[b], calls)
            single[name, b].append(one)
            ratios[name, b].append(two / one)

    print(f"\n{args.rounds} rounds interleaved; 1 intra-op thread; digits CNN")
    print(f"{'backend':12} {'batch':>5} {'median us/call':>15} {'(round range)':>17} {'1-thread calls/s':>17} "
          f"{'2 thr / 1 thr':>14} {'(range)':>13}")  # fmt: skip
    for name, b in rows:
        us = [t * 1e6 for t in round_medians[name, b]]
        print(
            f"{name:12} {b:5d} {statistics.median(samples[name, b]) * 1e6:15.1f} {span(us, 1):>17} "
            f"{statistics.median(single[name, b]):17.0f} "
            f"{statistics.median(ratios[name, b]):14.2f} {span(ratios[name, b], 2):>13}"
        )
    figures = {}
    for name, b in rows:
        figures[name, b] = {
            "us_per_call": statistics.median(samples[name, b]) * 1e6,
            "calls_per_s": statistics.median(single[name, b]),
            "scaling": statistics.median(ratios[name, b]),
        }
    if {"eager", "onnxruntime"} <= set(runtimes):
        for b in BATCHES:
            speedup = statistics.median(samples["eager", b]) / statistics.median(samples["onnxruntime", b])
            print(f"onnxruntime vs eager at batch {b}: {speedup:.1f}x faster per call")
    return figures


AUTO_DOC = """What backend ``auto`` picks for a model, its table, and how stable the pick is under noise.

    python -m loadtest.bench auto [--model inferpool.engine.zoo.mlp:build ...] \
        [--backends eager,onnxruntime] [--repeats 3]

Runs the startup chooser (inferpool.engine.backends.autoselect) ``--repeats`` times per model, in one
process with one intra-op thread (as the service runs by default), prints each table and how
often each backend won. Compiles are repeated too, so slow compilers (aoti) dominate the time."""

AUTO_MODELS = ("inferpool.engine.zoo.mlp:build", "inferpool.engine.zoo.digits:build")


def auto_parser() -> argparse.ArgumentParser:
    parser = case_parser("auto", AUTO_DOC)
    parser.add_argument("--model", action="append", help=f"model source (repeatable); default {AUTO_MODELS}")
    parser.add_argument("--backends", default="", help="comma-separated candidates; default every backend")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch-size", type=int, default=1)
    return parser


def auto(argv: list[str] | None = None) -> dict[str, Counter[str]]:
    args = auto_parser().parse_args(argv)
    apply_thread_plan(ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1))
    candidates = tuple(filter(None, args.backends.split(","))) or tuple(BACKENDS)
    options = RuntimeOptions(backend=AUTO, auto_backends=candidates, max_batch_size=args.max_batch_size)
    warnings.simplefilter("ignore", FutureWarning)  # torchscript's deprecation, once per compile
    chosen = {}
    for source in args.model or AUTO_MODELS:
        module = InferenceModule.from_spec(load_model(source))
        wins: Counter[str] = Counter()
        for repeat in range(args.repeats):
            started = time.perf_counter()
            choice = resolve_backend(module, options)
            wins[choice.name] += 1
            print(f"\n{source} run {repeat + 1}: chose {choice.name} in {time.perf_counter() - started:.1f} s")
            print(format_table(choice.trials))
        print(f"\n{source}: chosen {dict(wins)} of {args.repeats} runs")
        chosen[source] = wins
    return chosen


DEFAULTS_DOC = """What the defaults choose on this machine, and what choosing costs at startup.

    python -m loadtest.bench defaults [--models digits,mlp] [--repeats 2]
    python -m loadtest.bench defaults --startup digits auto     # one load, then exit

Per model and repeat: ``backend = "auto"`` (the candidate table: compile s, batch-1 µs, score)
and ``dispatch = "auto"`` on the chosen backend's batch-1 call (call µs, GIL share, hand-off
µs, rule and reason), with the seconds each took. ``--startup MODEL BACKEND`` loads the model
the way ``inferpool serve`` does (thread plan, backend, one runtime, warm-up, and for ``auto``
the dispatch measurement) and exits, so that a whole-process timer (``/usr/bin/time -v``, or
``hyperfine``) gives the startup cost of ``auto`` against a named backend."""

DEFAULT_MODELS = {
    "digits": "inferpool.engine.zoo.digits:build",
    "mlp": "inferpool.engine.zoo.mlp:build",
    "minilm": "inferpool.engine.zoo.minilm:build",
}


def choose(model: str, backend: str = "auto") -> dict[str, object]:
    """Load ``model`` as serving would, choose its backend and (for ``auto``) its dispatch."""
    started = time.perf_counter()
    options = RuntimeOptions(backend=backend)
    plan = plan_threads(options)
    apply_thread_plan(plan)
    module = InferenceModule.from_spec(load_model(DEFAULT_MODELS[model]))
    loaded = time.perf_counter()
    selection = resolve_backend(module, options)
    runtime = selection.backend(module, options, selection.compiled)
    runtime.warmup()
    chosen = time.perf_counter()
    mode, figures = "threads", {}  # the old default, for a named backend
    if backend == "auto":
        example = module.example_inputs
        choice = decide(lambda: runtime.run(example), plan.cpus)
        mode, figures = choice.mode, choice.figures
    return {
        "model": model,
        "backend": selection.name,
        "table": format_table(selection.trials) if selection.trials else "",
        "load_s": round(loaded - started, 2),
        "backend_s": round(chosen - loaded, 2),
        "dispatch": mode,
        "figures": figures,
        "dispatch_s": round(time.perf_counter() - chosen, 2),
    }


def defaults_parser() -> argparse.ArgumentParser:
    parser = case_parser("defaults", DEFAULTS_DOC)
    parser.add_argument("--models", default="digits,mlp")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--startup", nargs=2, metavar=("MODEL", "BACKEND"))
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of tables")
    return parser


def defaults(argv: list[str] | None = None) -> list[dict[str, object]]:
    args = defaults_parser().parse_args(argv)
    if args.startup:
        return [choose(*args.startup)]
    rows = []
    for repeat in range(args.repeats):
        for model in args.models.split(","):
            row = choose(model)
            rows.append(row)
            if args.json:
                print(json.dumps(row | {"repeat": repeat}))
                continue
            print(
                f"\n== {model}, repeat {repeat + 1}: backend {row['backend']} in {row['backend_s']} s (model "
                f"loaded in {row['load_s']} s), dispatch {row['dispatch']} in {row['dispatch_s']} s"
            )
            print(row["table"])
            print("  dispatch figures: " + json.dumps(row["figures"]))
    return rows
