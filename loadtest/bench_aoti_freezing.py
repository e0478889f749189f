"""Why the aoti backend compiles without freezing: frozen vs unfrozen AOTInductor packages.

    python -m loadtest.bench_aoti_freezing [--rounds N] [--cache-dir DIR]

Compiles the MLP and the digits CNN at batch 1 and 32 (minimal ArrayRef interface) three ways --
frozen (inductor's default when freezing: mkldnn weight prepacking), frozen without weight
prepacking, and not frozen (what inferpool.engine.backends.aoti.compile uses) -- into a separate cache
(the variants change the cache key through the configs), then times ``runtime.run`` for every
variant interleaved round by round. The first run compiles 12 packages (minutes).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch

from inferpool.engine import InferenceModule, RuntimeOptions
from inferpool.engine.backends.aoti import AotiRuntime
from inferpool.engine.backends.aoti import compile as aoti_compile
from inferpool.engine.threads import apply_thread_plan
from loadtest.bench_aoti import MODELS
from loadtest.bench_backends import PLAN, latencies, span

MINIMAL = {"aot_inductor.use_minimal_arrayref_interface": True, "aot_inductor.allow_stack_allocation": True}
VARIANTS: dict[str, dict[str, object]] = {
    "frozen": {**MINIMAL, "freezing": True},
    "frozen-no-prepack": {**MINIMAL, "freezing": True, "cpp.weight_prepack": False},
    "not-frozen": {**MINIMAL, "freezing": False},
}
SIZES = (1, 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache-dir", default=f"{tempfile.gettempdir()}/inferpool-freezing-cache")
    args = parser.parse_args()
    apply_thread_plan(PLAN)
    torch.set_num_threads(1)
    rows = {}
    for model in ("mlp", "digits"):
        module = InferenceModule.from_spec(MODELS[model][0]())
        options = RuntimeOptions(backend="aoti", compiled_batch_sizes=SIZES, compile_cache_dir=args.cache_dir)
        for variant, configs in VARIANTS.items():
            aoti_compile.INDUCTOR_CONFIGS["minimal_arrayref"] = configs
            runtime = AotiRuntime(module, options, AotiRuntime.compile(module, options))
            for size in SIZES:
                rows[model, variant, size] = (runtime, module.examples(size))
    medians: dict[tuple[str, str, int], list[float]] = {key: [] for key in rows}
    for _ in range(args.rounds):
        for key, (runtime, example) in rows.items():
            calls = 400 if key[2] == 1 else 100
            latencies(runtime, example, calls // 4)  # warm
            medians[key].append(statistics.median(latencies(runtime, example, calls)) * 1e6)
    print(f"\n{args.rounds} rounds interleaved, 1 intra-op thread, minimal ArrayRef interface; median us/call")
    for key, values in medians.items():
        print(f"{key[0]:7} {key[1]:18} batch {key[2]:3d} {statistics.median(values):8.1f} {span(values, 1):>17}")


if __name__ == "__main__":
    main()
