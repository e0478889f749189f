"""What backend ``auto`` picks for a model, its table, and how stable the pick is under noise.

    python -m loadtest.bench_auto [--model inferpool.engine.zoo.mlp:build ...] \
        [--backends eager,onnxruntime] [--repeats 3]

Runs the startup chooser (inferpool.engine.backends.autoselect) ``--repeats`` times per model, in one
process with one intra-op thread (as the service runs by default), prints each table and how
often each backend won. Compiles are repeated too, so slow compilers (aoti) dominate the time.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions, load_model
from inferpool.engine.backends import AUTO
from inferpool.engine.backends.autoselect import format_table, resolve_backend
from inferpool.engine.threads import ThreadPlan, apply_thread_plan

MODELS = ("inferpool.engine.zoo.mlp:build", "inferpool.engine.zoo.digits:build")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help=f"model source (repeatable); default {MODELS}")
    parser.add_argument("--backends", default="", help="comma-separated candidates; default every backend")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch-size", type=int, default=1)
    args = parser.parse_args()
    apply_thread_plan(ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1))
    candidates = tuple(filter(None, args.backends.split(","))) or tuple(BACKENDS)
    options = RuntimeOptions(backend=AUTO, auto_backends=candidates, max_batch_size=args.max_batch_size)
    warnings.simplefilter("ignore", FutureWarning)  # torchscript's deprecation, once per compile
    for source in args.model or MODELS:
        module = InferenceModule.from_spec(load_model(source))
        wins: Counter[str] = Counter()
        for repeat in range(args.repeats):
            started = time.perf_counter()
            choice = resolve_backend(module, options)
            wins[choice.name] += 1
            print(f"\n{source} run {repeat + 1}: chose {choice.name} in {time.perf_counter() - started:.1f} s")
            print(format_table(choice.trials))
        print(f"\n{source}: chosen {dict(wins)} of {args.repeats} runs")


if __name__ == "__main__":
    main()
