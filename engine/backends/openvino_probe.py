"""The openvino wide lane's timing, run as a process of its own (``python -m`` this module).

A process that compiled and ran a model of two threads leaves the processes it forks later
hanging when they compile their own (openvino's thread pool, measured: the supervisor's
children never became ready). So the supervisor, which forks the serving processes, asks a
fresh interpreter to time the wide artifact instead (inferpool.engine.backends.openvino's
``wide_seconds_apart``). This module imports nothing but numpy, openvino and the engine's light
``calm_timing``, so that the interpreter starts in well under a second: no torch.

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
import sys
from typing import Any, TypedDict

import numpy as np

from inferpool.engine.plan.calm_timing import calmest_pair


class Probe(TypedDict):
    model: str | bytes
    """The ONNX file's path, or its bytes (an unwritable export cache)."""
    config: dict[str, Any]
    """The wide artifact's ``compile_model`` properties (inferpool.engine.backends.openvino.compile_config)."""
    narrow_config: dict[str, Any]
    """The narrow one's: what a serving runtime runs."""
    examples: list[dict[str, np.ndarray]]
    repeats: int
    enough: float
    """The gate's speedup: a block that reaches it ends the timing (inferpool.engine.plan.calm_timing)."""


def median_pair(
    narrow: Any, wide: Any, inputs: dict[str, np.ndarray], repeats: int, enough: float = float("inf")
) -> list[float]:
    """The median seconds of ``repeats`` narrow and wide calls on ``inputs``, alternating, from
    the calmest block (inferpool.engine.plan.calm_timing)."""
    return list(
        calmest_pair(
            lambda: narrow.infer(inputs, share_inputs=True),
            lambda: wide.infer(inputs, share_inputs=True),
            repeats,
            enough,
        )
    )


def measure(probe: Probe) -> list[list[float]]:
    ov = importlib.import_module("openvino")  # untyped, as the backend's own require()

    core = ov.Core()
    model = probe["model"]
    weights = () if isinstance(model, str) else (ov.Tensor(np.empty(0, np.uint8)),)  # bytes: no weights file
    read = core.read_model(model, *weights)
    narrow, wide = (
        core.compile_model(read, "CPU", probe[key]).create_infer_request() for key in ("narrow_config", "config")
    )
    return [median_pair(narrow, wide, example, probe["repeats"], probe["enough"]) for example in probe["examples"]]


def main() -> None:
    probe: Probe = pickle.load(sys.stdin.buffer)
    sys.stdout.write(json.dumps(measure(probe)))


if __name__ == "__main__":
    main()
