"""onnxruntime's spin policies for a wide session (inferpool.engine.backends.onnxruntime's
``wide_artifact``), timed with idle gaps between calls, as a lane serves a lone client.

    python -m loadtest.bench_spin [--model loadtest.resnet:build] [--calls 15] [--rounds 3]

Exports the model as the server does (its ONNX cache), then builds four sessions on the file: one
thread, and two threads spinning always, never (``allow_spinning=0``) and only within a run
(``force_spinning_stop=1``). Each cell is the median time of ``--calls`` calls with a 0, 2 or 20 ms
sleep before each, and the process's CPU over that time in cores (what spinning costs between
calls). Prints one line per round and gap.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inferpool.engine import RuntimeOptions, ServedModel
from inferpool.engine.backends.onnxruntime.runtime import checked, session_options

SPIN = {
    "1 thread": (1, {}),
    "2 spin": (2, {}),
    "2 no spin": (2, {"session.intra_op.allow_spinning": "0"}),
    "2 spin+stop": (2, {"session.force_spinning_stop": "1"}),
}
GAPS = (0.0, 0.002, 0.02)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(call: Callable[[], object], gap: float, calls: int) -> tuple[float, float]:
    """Median ms a call, and CPU cores over the whole stretch (gaps included)."""
    times = []
    cpu, wall = _cpu(), time.perf_counter()
    for _ in range(calls):
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3, (_cpu() - cpu) / (time.perf_counter() - wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="loadtest.resnet:build")
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    options = RuntimeOptions(backend="onnxruntime", warmup_iters=1, lend_idle_cores="off")
    served = ServedModel.load(args.model, options)  # exports into the ONNX cache, as serving does
    module = served.module
    known = checked(module)
    if known is None:
        raise SystemExit(f"{args.model}: no checked ONNX export in this process")
    exported = known.exported.model
    model = str(exported) if isinstance(exported, Path) else exported
    inputs = {name: np.ascontiguousarray(value) for name, value in module.example_inputs.items()}
    sessions = {}
    for name, (threads, entries) in SPIN.items():
        so = session_options(RuntimeOptions(backend="onnxruntime", intra_op_threads=threads))
        for key, value in entries.items():
            so.add_session_config_entry(key, value)
        sessions[name] = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    served.close()
    for session in sessions.values():
        for _ in range(3):
            session.run(None, inputs)
    for round_ in range(args.rounds):
        for gap in GAPS:
            cells = []
            for name, session in sessions.items():
                ms, cores = _timed(partial(session.run, None, inputs), gap, args.calls)
                cells.append(f"{name} {ms:.1f} ms ({cores:.2f} cores)")
            print(f"round {round_} gap {gap * 1e3:g} ms: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
