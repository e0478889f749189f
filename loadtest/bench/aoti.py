"""AOTInductor (minimal ArrayRef through ctypes, and PyTorch's loader) vs eager vs ONNX Runtime.

    python -m loadtest.bench aoti [--rounds N] [--calls N] [--models mlp digits] [--cache-dir DIR]

Per model and batch size, all rows in one process, interleaved round by round (the machine is
noisy): median µs per ``runtime.run`` and 2-thread / 1-thread throughput (2.0 = perfect on 2
cores; ~1.0 = the GIL or a lock serialises the calls). Then RSS of a fresh process holding the
loaded artifact with 1 and with 8 warm runtimes, per backend (weights shared or not).
The first run compiles every package (tens of seconds each) into the cache; later runs load them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions
from inferpool.engine.backends.base import Runtime
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.plan.threads import apply_thread_plan
from inferpool.engine.zoo import digits, mlp
from loadtest.bench import case_parser
from loadtest.bench.backends import PLAN, latencies, span, throughput


def wide() -> ModelSpec:
    """64 -> 4096 -> 4096 -> 10 (67 MB of float32 weights, seeded): big enough that a copy of
    the weights per runtime would show in RSS, which the zoo models' few hundred KB do not."""
    generator = torch.Generator().manual_seed(0)
    layers = [torch.nn.Linear(64, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.Linear(4096, 10)]
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * parameter.shape[-1] ** -0.5)
    return ModelSpec(module=model, example_inputs={"x": torch.zeros(1, 64)}, output_names=("logits",), name="wide")


MODELS: dict[str, tuple[Callable[[], ModelSpec], tuple[int, ...]]] = {
    "mlp": (mlp.build, (1, 32, 256)),  # 256: compute-bound, where releasing the GIL should pay
    "digits": (digits.build, (1, 32)),
    "wide": (wide, (1,)),  # RSS only
}
ROWS = {  # row name -> (backend, aoti_interface: only the aoti rows read it)
    "eager": ("eager", "minimal_arrayref"),
    "onnxruntime": ("onnxruntime", "minimal_arrayref"),
    "aoti-minimal": ("aoti", "minimal_arrayref"),
    "aoti-loader": ("aoti", "loader"),
}


def options(row: str, sizes: tuple[int, ...], cache_dir: str) -> RuntimeOptions:
    backend, interface = ROWS[row]
    return RuntimeOptions(
        backend=backend,
        intra_op_threads=1,
        compiled_batch_sizes=sizes,
        compile_cache_dir=cache_dir,
        aoti_interface=interface,
    )


def load(model: str, row: str, cache_dir: str, runtimes: int) -> tuple[InferenceModule, list[Runtime]]:
    build, sizes = MODELS[model]
    module = InferenceModule.from_spec(build())
    opts = options(row, sizes, cache_dir)
    backend = BACKENDS[opts.backend]
    compiled = backend.compile(module, opts)
    made = [backend(module, opts, compiled) for _ in range(runtimes)]
    for runtime in made:
        runtime.warmup()
    return module, made


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return kb / 1024


def rss_child(model: str, row: str, cache_dir: str) -> None:
    """In a fresh process: RSS after loading + 1 runtime, and after 7 more (each warm)."""
    apply_thread_plan(PLAN)
    module, first = load(model, row, cache_dir, 1)
    one = rss_mb()
    opts = options(row, MODELS[model][1], cache_dir)
    more = [type(first[0])(module, opts, first[0].compiled) for _ in range(7)]
    for runtime in more:
        runtime.warmup()
        for size in MODELS[model][1]:  # touch every compiled size once, as traffic would
            runtime.run({k: np.concatenate([v] * size) for k, v in module.example_inputs.items()})
    print(f"{one:.1f} {rss_mb():.1f}")


def measure_rss(model: str, row: str, cache_dir: str) -> str:
    command = [sys.executable, "-m", "loadtest.bench", "aoti", "--rss-child", model, row, "--cache-dir", cache_dir]
    one, eight = map(float, subprocess.check_output(command, text=True).split()[-2:])
    each = (eight - one) / 7
    return f"{model:7} {row:13} 1 runtime {one:7.1f} MB   8 runtimes {eight:7.1f} MB   +{each:5.2f} MB each"


def overhead(cache_dir: str, rounds: int) -> None:
    """What the Python around each AOTInductor call costs: the bare C call vs ``runtime.run``,
    for the ctypes path and PyTorch's loader, on the MLP at batch 1 (1000 calls per round)."""
    _, (minimal,) = load("mlp", "aoti-minimal", cache_dir, 1)
    _, (loader,) = load("mlp", "aoti-loader", cache_dir, 1)
    x = {"x": np.ones((1, 64), np.float32)}
    caller = minimal._callers[1]  # type: ignore[attr-defined]
    lib, handle, descs = caller._lib, caller._handle, (caller._in, caller._out)
    tensors = [torch.from_numpy(x["x"])]
    rows: dict[str, Callable[[], object]] = {
        "ctypes: bare V2 call": lambda: lib.run_raw(handle, 1, descs[0], 1, descs[1]),
        "ctypes: caller()": caller,
        "ctypes: runtime.run": lambda: minimal.run(x),
        "loader: bare run": lambda: loader.compiled.shared[1].loader.run(tensors),
        "loader: runtime.run": lambda: loader.run(x),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, call in rows.items():
            for _ in range(100):
                call()
            started = time.perf_counter()
            for _ in range(1000):
                call()
            times[name].append((time.perf_counter() - started) * 1e3)
    print(f"\nMLP batch 1, {rounds} rounds interleaved: mean us/call per round, median (range)")
    for name, values in times.items():
        print(f"{name:22} {statistics.median(values):7.1f} {span(values, 1):>15}")


def aoti_parser() -> argparse.ArgumentParser:
    parser = case_parser("aoti", __doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="calls per row per round at batch 1 (fewer above)")
    parser.add_argument("--models", nargs="+", default=["mlp", "digits"], choices=list(MODELS))
    parser.add_argument("--rss-models", nargs="*", default=["digits", "wide"], choices=list(MODELS))
    parser.add_argument("--cache-dir", default="", help="compile cache ('' = the default, ~/.cache/inferpool)")
    parser.add_argument("--overhead", action="store_true", help="only the per-call Python overhead table")
    parser.add_argument("--rss-child", nargs=2, metavar=("MODEL", "ROW"), help=argparse.SUPPRESS)
    return parser


def aoti(argv: list[str] | None = None) -> None:
    args = aoti_parser().parse_args(argv)
    if args.rss_child:
        model, row = args.rss_child
        rss_child(model, row, args.cache_dir)
        return
    apply_thread_plan(PLAN)
    torch.set_num_threads(1)
    if args.overhead:
        overhead(args.cache_dir, args.rounds)
        return
    for model in args.models:
        runtimes: dict[str, list[Runtime]] = {}
        for row in ROWS:
            started = time.perf_counter()
            module, runtimes[row] = load(model, row, args.cache_dir, 2)
            print(f"{model} {row}: ready in {time.perf_counter() - started:.1f} s", flush=True)
        rng = np.random.default_rng(0)
        examples = module.example_inputs
        inputs = {
            b: {k: (rng.standard_normal((b, *v.shape[1:])) * 8).astype(v.dtype) for k, v in examples.items()}
            for b in MODELS[model][1]
        }
        bench(model, runtimes, inputs, args.rounds, args.calls)
    print("\nRSS (fresh process per row; weights once per model, or once per runtime?)")
    for model in args.rss_models:
        for row in ROWS:
            print(measure_rss(model, row, args.cache_dir), flush=True)


def bench(model: str, runtimes: dict[str, list[Runtime]], inputs: dict[int, dict], rounds: int, calls: int) -> None:
    rows = [(row, b) for b in inputs for row in runtimes]
    medians: dict[tuple[str, int], list[float]] = {key: [] for key in rows}
    ratios: dict[tuple[str, int], list[float]] = {key: [] for key in rows}
    for _ in range(rounds):
        for row, b in rows:
            n = max(20, calls * 4 // (b + 3))
            pair = runtimes[row]
            medians[row, b].append(statistics.median(latencies(pair[0], inputs[b], n)) * 1e6)
            ratios[row, b].append(throughput(pair, inputs[b], n) / throughput(pair[:1], inputs[b], n))
    print(f"\n{model}: {rounds} rounds interleaved, 1 intra-op thread")
    print(f"{'backend':13} {'batch':>5} {'us/call':>9} {'(round range)':>19} {'2 thr / 1 thr':>14} {'(range)':>13}")
    for row, b in rows:
        print(
            f"{row:13} {b:5d} {statistics.median(medians[row, b]):9.1f} {span(medians[row, b], 1):>19} "
            f"{statistics.median(ratios[row, b]):14.2f} {span(ratios[row, b], 2):>13}"
        )
