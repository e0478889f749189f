"""What the defaults choose on this machine, and what choosing costs at startup.

    python -m loadtest.bench_defaults [--models digits,mlp] [--repeats 2]
    python -m loadtest.bench_defaults --startup digits auto     # one load, then exit

Per model and repeat: ``backend = "auto"`` (the candidate table: compile s, batch-1 µs, score)
and ``dispatch = "auto"`` on the chosen backend's batch-1 call (call µs, GIL share, hand-off
µs, rule and reason), with the seconds each took. ``--startup MODEL BACKEND`` loads the model
the way ``inferpool serve`` does (thread plan, backend, one runtime, warm-up, and for ``auto``
the dispatch measurement) and exits, so that a whole-process timer (``/usr/bin/time -v``, or
``hyperfine``) gives the startup cost of ``auto`` against a named backend.
"""

from __future__ import annotations

import argparse
import json
import time

from inferpool.engine import RuntimeOptions
from inferpool.engine.backends.autoselect import format_table, resolve_backend
from inferpool.engine.dispatch_choice import decide
from inferpool.engine.module import InferenceModule
from inferpool.engine.sources import load_model
from inferpool.engine.threads import apply_thread_plan, plan_threads

MODELS = {
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
    module = InferenceModule.from_spec(load_model(MODELS[model]))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="digits,mlp")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--startup", nargs=2, metavar=("MODEL", "BACKEND"))
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of tables")
    args = parser.parse_args()
    if args.startup:
        choose(*args.startup)
        return
    for repeat in range(args.repeats):
        for model in args.models.split(","):
            row = choose(model)
            if args.json:
                print(json.dumps(row | {"repeat": repeat}))
                continue
            print(
                f"\n== {model}, repeat {repeat + 1}: backend {row['backend']} in {row['backend_s']} s (model "
                f"loaded in {row['load_s']} s), dispatch {row['dispatch']} in {row['dispatch_s']} s"
            )
            print(row["table"])
            print("  dispatch figures: " + json.dumps(row["figures"]))


if __name__ == "__main__":
    main()
