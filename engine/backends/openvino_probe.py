"""The openvino wide lane's timing, run as a process of its own (``python -m`` this module).

A process that compiled and ran a model of two threads leaves the processes it forks later
hanging when they compile their own (openvino's thread pool, measured: the supervisor's
children never became ready). So the supervisor, which forks the serving processes, asks a
fresh interpreter to time the wide artifact instead (inferpool.engine.backends.openvino's
``wide_seconds_apart``). This module imports nothing but numpy and openvino, so that the
interpreter starts in well under a second: no torch, no engine.

Protocol: a pickled ``Probe`` dict on stdin; on stdout one JSON list, the median seconds of each
example's calls; a failure exits non-zero with its message on stderr.
"""

from __future__ import annotations

import importlib
import json
import pickle
import statistics
import sys
import time
from typing import Any, TypedDict

import numpy as np


class Probe(TypedDict):
    model: str | bytes
    """The ONNX file's path, or its bytes (an unwritable export cache)."""
    config: dict[str, Any]
    """``compile_model``'s properties (inferpool.engine.backends.openvino.compile_config)."""
    examples: list[dict[str, np.ndarray]]
    repeats: int


def median_seconds(request: Any, inputs: dict[str, np.ndarray], repeats: int) -> float:
    request.infer(inputs, share_inputs=True)  # warm: a new shape's first run allocates
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        request.infer(inputs, share_inputs=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(probe: Probe) -> list[float]:
    ov = importlib.import_module("openvino")  # untyped, as the backend's own require()

    core = ov.Core()
    model = probe["model"]
    weights = () if isinstance(model, str) else (ov.Tensor(np.empty(0, np.uint8)),)  # bytes: no weights file
    read = core.read_model(model, *weights)
    request = core.compile_model(read, "CPU", probe["config"]).create_infer_request()
    return [median_seconds(request, example, probe["repeats"]) for example in probe["examples"]]


def main() -> None:
    probe: Probe = pickle.load(sys.stdin.buffer)
    sys.stdout.write(json.dumps(measure(probe)))


if __name__ == "__main__":
    main()
