"""Bare-engine items/s: eager, onnxruntime and openvino in fp32, and both in int8 (issue 31).

    python -m loadtest.bench_precision [--models digits,mlp,minilm,resnet] [--rounds N] [--seconds S]
    python -m loadtest.bench_precision --models resnet,digits --cases 1x2,8x1   # batch x threads

No server: one runtime per row on its backend's shared artifact, called back to back on one
batch, in rounds interleaved across the rows of a model and thread count so that machine noise
hits them alike; the figure is the median over rounds of items per second. ``threads`` is
``intra_op_threads`` (torch's for eager). int8 rows are built with the gate's threshold at -1,
so that they are timed even when int8 fails the gate; the gate's min / mean cosine (at the
default threshold 0.99: pass or FAIL) are printed beside them. MiniLM's gate inputs are varied
texts (``inferpool.engine.zoo.minilm.HELD_OUT_TEXTS``), tokenized as its handler does; the
others use the default gate inputs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions, load_model
from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.precision import Gate, precision_choice
from inferpool.engine.schema import Array

MODELS = {
    "digits": "inferpool.engine.zoo.digits:build",
    "mlp": "inferpool.engine.zoo.mlp:build",
    "minilm": "inferpool.engine.zoo.minilm:build",
    "resnet": "loadtest.resnet:build",
}
CONVOLUTIONAL = ("digits", "resnet")


def configs(name: str) -> list[tuple[str, str, str]]:
    """(row label, backend, int8 method or "fp32")."""
    backends = ["onnxruntime", *(["openvino"] if find_spec("openvino") is not None else [])]
    methods = ["dynamic", *(["static"] if name in CONVOLUTIONAL else [])]
    rows = [("eager", "eager", "fp32"), *((b, b, "fp32") for b in backends)]
    return rows + [(f"{b} int8 {m}", b, m) for b in backends for m in methods]


def verdict(gate: Gate) -> str:
    """The gate's figures, judged at the default thresholds."""
    judged = Gate(gate.figures, 0.99, 0.99, gate.inputs, gate.method)
    return f"gate at 0.99: {'pass' if judged.passed else 'FAIL'} ({judged.describe()})"


def minilm_gate_file(directory: Path) -> str:
    from inferpool.engine.zoo.minilm import write_held_out

    return str(write_held_out(directory / "minilm-gate.npz"))


def items_per_second(runtime: Runtime, inputs: dict[str, Array], seconds: float) -> float:
    batch = next(iter(inputs.values())).shape[0]
    calls, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        runtime.run(inputs)
        calls += 1
    return calls * batch / elapsed


def bench_model(name: str, threads: int, batches: list[int], args: argparse.Namespace, gate: str) -> None:
    torch.set_num_threads(threads)
    module = InferenceModule.from_spec(load_model(MODELS[name]))
    runtimes: dict[str, Runtime] = {}
    gates: dict[str, str] = {}
    for label, backend, method in configs(name):
        int8 = method != "fp32"
        options = RuntimeOptions(
            backend=backend, intra_op_threads=threads, precision="int8" if int8 else "fp32",
            compile_cache_dir=args.cache, accuracy_min_cosine=-1.0, accuracy_min_agreement=0.0,
            accuracy_inputs=gate if int8 else "", int8_methods=(method,) if int8 else (),
        )  # fmt: skip
        started = time.perf_counter()
        compiled = BACKENDS[backend].compile(module, options)
        runtime = BACKENDS[backend](module, options, compiled)
        runtime.warmup()
        runtimes[label] = runtime
        choice = precision_choice(module) if int8 else None
        if choice is not None and choice.gate is not None:
            gates[label] = verdict(choice.gate)
        print(f"  {name} {label} threads={threads}: ready in {time.perf_counter() - started:.1f} s", flush=True)
    rows = [(label, b) for b in batches for label in runtimes]
    inputs = {b: module.examples(b) for b in batches}
    figures: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    for _ in range(args.rounds):
        for label, b in rows:
            figures[label, b].append(items_per_second(runtimes[label], inputs[b], args.seconds))
    for b in batches:
        eager = statistics.median(figures["eager", b])
        for label in runtimes:
            value = statistics.median(figures[label, b])
            gate = gates.get(label, "")
            print(f"| {name} | {b} | {threads} | {label} | {value:,.1f} | {value / eager:.2f} | {gate} |")


def cases(args: argparse.Namespace, batches: list[int]) -> dict[int, list[int]]:
    """Threads -> batch sizes: the grid of --threads x --batches, or the --cases pairs."""
    if not args.cases:
        return {int(t): batches for t in args.threads.split(",")}
    grouped: dict[int, list[int]] = {}
    for case in args.cases.split(","):
        batch, threads = (int(v) for v in case.split("x"))
        grouped.setdefault(threads, []).append(batch)
    return grouped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="digits,mlp,minilm")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--cases", default="", help="batch x threads pairs, e.g. 1x2,8x1 (instead of the grid)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.5, help="per row and round")
    parser.add_argument("--cache", default="", help="compile cache (default: the user's)")
    args = parser.parse_args()
    torch.set_num_interop_threads(1)
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        gate = minilm_gate_file(Path(scratch)) if "minilm" in args.models else ""
        print("| model | batch | threads | backend | items/s | x eager | int8 gate |")
        print("|---|---|---|---|---|---|---|")
        for name in args.models.split(","):
            for threads, sizes in cases(args, batches).items():
                bench_model(name, threads, sizes, args, gate if name == "minilm" else "")


if __name__ == "__main__":
    main()
