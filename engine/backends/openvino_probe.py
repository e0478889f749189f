"""The openvino wide lane's timing, run as a process of its own (``python -m`` this module).

A process that compiled and ran a model of two threads leaves the processes it forks later
hanging when they compile their own (openvino's thread pool, measured: the supervisor's
children never became ready). So the supervisor, which forks the serving processes, asks a
fresh interpreter to time the wide artifact instead (inferpool.engine.backends.openvino's
``wide_seconds_apart``). This module imports nothing but numpy and openvino, so that the
interpreter starts in well under a second: no torch, no engine.

The narrow artifact (one thread) is timed here too, its calls alternating with the wide one's:
a narrow time taken in the parent, seconds earlier, against a wide one taken here let anything
that ran between them decide (a start-up beside another process measured the lane 0.95x, the
same tree alone 1.71x), where alternating calls share whatever the machine is doing.

Protocol: a pickled ``Probe`` dict on stdin; on stdout one JSON list, for each example the median
seconds of its narrow and of its wide calls; a failure exits non-zero with its message on stderr.
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
    """The wide artifact's ``compile_model`` properties (inferpool.engine.backends.openvino.compile_config)."""
    narrow_config: dict[str, Any]
    """The narrow one's: what a serving runtime runs."""
    examples: list[dict[str, np.ndarray]]
    repeats: int


BLOCKS = 3
"""Alternating narrow and wide calls are timed in this many blocks, ``PAUSE_SECONDS`` apart, and the
block with the best narrow / wide ratio is reported. A neighbour on a shared host slows the wide
call (which needs every core) far more than the narrow one, for a second or so at a time: on the
2-vCPU machine of docs/BENCHMARKS.md (fourteenth session; ~4 % steal), single blocks of MiniLM's
call measured 0.76-1.40x where the quiet-machine figure is ~1.3x, and the start-up gate kept the
lane in about half the starts. The lane only runs when the pod is idle, so the quiet figure is
the one that matters."""
PAUSE_SECONDS = 0.1


def median_pair(narrow: Any, wide: Any, inputs: dict[str, np.ndarray], repeats: int) -> list[float]:
    """The median seconds of ``repeats`` narrow and wide calls on ``inputs``, alternating, from the
    block (of ``BLOCKS``) where wide gained most."""
    for request in (narrow, wide):
        request.infer(inputs, share_inputs=True)  # warm: a new shape's first run allocates
    blocks = []
    for block in range(BLOCKS):
        if block:
            time.sleep(PAUSE_SECONDS)
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):
            for request, kept in zip((narrow, wide), times, strict=True):
                started = time.perf_counter()
                request.infer(inputs, share_inputs=True)
                kept.append(time.perf_counter() - started)
        blocks.append([statistics.median(kept) for kept in times])
    return max(blocks, key=lambda pair: pair[0] / pair[1])


def measure(probe: Probe) -> list[list[float]]:
    ov = importlib.import_module("openvino")  # untyped, as the backend's own require()

    core = ov.Core()
    model = probe["model"]
    weights = () if isinstance(model, str) else (ov.Tensor(np.empty(0, np.uint8)),)  # bytes: no weights file
    read = core.read_model(model, *weights)
    narrow, wide = (
        core.compile_model(read, "CPU", probe[key]).create_infer_request() for key in ("narrow_config", "config")
    )
    return [median_pair(narrow, wide, example, probe["repeats"]) for example in probe["examples"]]


def main() -> None:
    probe: Probe = pickle.load(sys.stdin.buffer)
    sys.stdout.write(json.dumps(measure(probe)))


if __name__ == "__main__":
    main()
