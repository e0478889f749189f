"""The ``static`` backend against eager, ONNX Runtime and TorchScript's Static Runtime, and the
effect of each of its options, on the MLP and the digits CNN at batch 1 and 32.

    python -m loadtest.bench static [--rounds N] [--calls N] [--models mlp,digits,minilm]

One process, one intra-op thread, every row interleaved round by round (the machine is noisy:
ratios within a round are what to read). Per row: median microseconds per ``runtime.run`` over
all calls, the range of the per-round medians, and the median over rounds of (row / eager in
the same round). Targets (issue #3): static <= 0.7x eager at batch 1 on both models.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions, load_model
from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.static import StaticRuntime
from inferpool.engine.plan.threads import ThreadPlan, apply_thread_plan
from loadtest.bench import case_parser
from loadtest.bench.backends import latencies, span

Inputs = Callable[[InferenceModule, int], dict[str, np.ndarray]]
SENTENCE = "Serving a small transformer on a CPU is mostly matrix products and Python overhead. " * 2


def pixels(module: InferenceModule, batch: int) -> dict[str, np.ndarray]:
    spec = module.schema.inputs[0]
    shape = tuple(d or 1 for d in spec.shape[1:])  # the MLP and the CNN: fixed sample shape
    return {spec.name: np.random.default_rng(batch).integers(0, 17, size=(batch, *shape)).astype(np.float32)}


def sentences(module: InferenceModule, batch: int) -> dict[str, np.ndarray]:
    from inferpool.engine.zoo.minilm import MiniLMHandler  # needs the 'minilm' extra

    arrays, _ = MiniLMHandler().preprocess([SENTENCE] * batch)
    return arrays


# Model -> (factory, inputs per batch size, batch sizes, calls divisor, rows).
MODELS: dict[str, tuple[str, Inputs, tuple[int, ...], int, tuple[str, ...]]] = {
    "mlp": ("inferpool.engine.zoo.mlp:build", pixels, (1, 32), 1, ()),
    "digits": ("inferpool.engine.zoo.digits:build", pixels, (1, 32), 1, ()),
    "minilm": (
        "inferpool.engine.zoo.minilm:build",
        sentences,
        (1, 8),
        50,
        ("eager", "static", "static, out_variant off"),
    ),
}
# Row -> (backend, option overrides, static executor). Defaults: out variants on, memory
# sharing on, cleanup on, managed outputs off (engine/options.py).
ROWS: dict[str, tuple[str, dict[str, Any], str]] = {
    "eager": ("eager", {}, ""),
    "onnxruntime": ("onnxruntime", {}, ""),
    "torchscript": ("torchscript", {}, ""),
    "static": ("static", {}, "codegen"),
    "static, loop executor": ("static", {}, "loop"),
    "static, out_variant off": ("static", {"enable_out_variant": False}, "codegen"),
    "static, optimize_memory off": ("static", {"optimize_memory": False}, "codegen"),
    "static, cleanup off": ("static", {"cleanup_activations": False}, "codegen"),
    "static, managed outputs": ("static", {"manage_output_tensors": True}, "codegen"),
}


def build_runtimes(module: InferenceModule, rows: tuple[str, ...]) -> dict[str, Runtime]:
    compiled: dict[str, Any] = {}
    runtimes: dict[str, Runtime] = {}
    for row, (backend, overrides, executor) in ROWS.items():
        if backend not in BACKENDS or (rows and row not in rows):
            continue  # another agent's backend not in this tree
        options = RuntimeOptions(backend=backend, intra_op_threads=1, **overrides)
        if backend not in compiled:
            compiled[backend] = BACKENDS[backend].compile(module, options)
        if backend == "static":
            runtimes[row] = StaticRuntime(module, options, compiled[backend], executor=executor)
        else:
            runtimes[row] = BACKENDS[backend](module, options, compiled[backend])
        runtimes[row].warmup()
    return runtimes


def slab_bytes(runtime: Runtime) -> str:
    if not isinstance(runtime, StaticRuntime) or not runtime.buffer_sets:
        return ""
    return f"{max(b.nbytes for b in runtime.buffer_sets.values()) / 1024:.0f} KiB"


def static_parser() -> argparse.ArgumentParser:
    parser = case_parser("static", __doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls per row per round (batch 32 runs 1/4)")
    parser.add_argument("--models", default="mlp,digits", help=f"comma-separated, of {sorted(MODELS)}")
    parser.add_argument("--rows", default="", help=f"comma-separated, of {list(ROWS)}; default all (eager always)")
    return parser


def static(argv: list[str] | None = None) -> dict[tuple[str, str, int], float]:
    args = static_parser().parse_args(argv)
    only = tuple(filter(None, args.rows.split(",")))
    figures: dict[tuple[str, str, int], float] = {}
    apply_thread_plan(ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1))
    torch.set_num_threads(1)
    print(f"{args.rounds} rounds interleaved; 1 intra-op thread; median us/call (range of round medians); x eager")
    print(f"{'model':7} {'row':28} {'batch':>5} {'us/call':>9} {'(rounds)':>15} {'x eager':>8} {'slab':>9}")
    for model_name in args.models.split(","):
        factory, make_inputs, batches, divisor, rows = MODELS[model_name]
        module = InferenceModule.from_spec(load_model(factory))
        wanted = (*(r for r in only if not rows or r in rows), "eager") if only else rows
        runtimes = build_runtimes(module, wanted)
        inputs = {b: make_inputs(module, b) for b in batches}
        calls = {b: max(1, args.calls // divisor // (1 if b == 1 else 4)) for b in batches}
        keys = [(row, b) for b in batches for row in runtimes]
        samples: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
        medians: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
        for _ in range(args.rounds):
            for row, b in keys:
                times = latencies(runtimes[row], inputs[b], calls[b])
                samples[row, b] += times
                medians[row, b].append(statistics.median(times))
        for row, b in keys:
            ratio = statistics.median(m / e for m, e in zip(medians[row, b], medians["eager", b], strict=True))
            us = [m * 1e6 for m in medians[row, b]]
            figures[model_name, row, b] = statistics.median(samples[row, b]) * 1e6
            print(
                f"{model_name:7} {row:28} {b:5d} {statistics.median(samples[row, b]) * 1e6:9.1f} {span(us, 1):>15} "
                f"{ratio:8.2f} {slab_bytes(runtimes[row]):>9}"
            )
    return figures
