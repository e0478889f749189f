"""The int8 gate's held-out inputs and the calibration of static quantization.

``runtime.accuracy_inputs`` names a file of the user's: a JSONL file, one call a line, each line
a JSON object of the model's inputs as a ``/predict`` request's ``inputs`` holds them (one
sample, or a batch: ``{"image": [[...], ...]}``), read with the request's own coercion and
shape checks; or an ``.npz`` of arrays named as the inputs (one batch). The file itself is
checked at start-up, before any model loads (inferpool.engine.backends.held_out_file, by the
settings' validation); the names and shapes against the model when it loads (``user_inputs``).

Calibration (static quantization) must not be the gate's own inputs, or the gate would grade the
quantizer on what it was fitted to: with a file or the model's held-out inputs, every
``CALIBRATION_EVERY``-th call calibrates and the others are the gate's; with neither, the gate
takes the example inputs and seeded random variations of them, and calibration other seeds'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from inferpool.engine.backends.parity import random_inputs
from inferpool.engine.errors import EngineError, ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.schema import Array

CALIBRATION_EVERY = 4
GATE_BATCH = 8
GATE_SEEDS = 4
"""Without held-out inputs: GATE_SEEDS random batches of GATE_BATCH items (and as many to calibrate)."""
Batches = list[dict[str, Array]]


def user_inputs(module: InferenceModule, path: str) -> Batches:
    """``accuracy_inputs`` read for ``module``: one batch per JSONL line, or the ``.npz``'s one."""
    names = [s.name for s in module.schema.inputs]
    if path.endswith(".npz"):
        try:
            with np.load(path) as data:
                return [{name: np.ascontiguousarray(data[name]) for name in names}]
        except (OSError, KeyError, ValueError) as exc:
            raise ModelLoadError(f"accuracy_inputs {path!r} is not an .npz of arrays named {names}: {exc}") from exc
    batches = []
    for number, line in enumerate((ln for ln in Path(path).read_text("utf-8").splitlines() if ln.strip()), 1):
        row = json.loads(line)
        if sorted(row) != sorted(names):
            raise ModelLoadError(
                f"line {number} of accuracy_inputs {path!r} has inputs {sorted(row)}; model {module.name!r} takes "
                f"{names}: write each line as {{{', '.join(repr(n) for n in names)}: ...}}"
            )
        try:
            batches.append({s.name: s.coerce(row[s.name], strict=True)[0] for s in module.schema.inputs})
        except EngineError as exc:
            raise ModelLoadError(f"line {number} of accuracy_inputs {path!r}: {exc}") from exc
    return batches


def _split(batches: Sequence[dict[str, Array]]) -> tuple[Batches, Batches]:
    """(calibration, gate): every CALIBRATION_EVERY-th batch calibrates, the others are gated."""
    calibration = [dict(b) for i, b in enumerate(batches) if i % CALIBRATION_EVERY == 0]
    gated = [dict(b) for i, b in enumerate(batches) if i % CALIBRATION_EVERY != 0]
    return calibration, gated or [dict(b) for b in batches]


def held_out(module: InferenceModule, accuracy_inputs: str, calibrating: bool) -> tuple[Batches, Batches, str]:
    """(calibration batches, gate batches, what the gate's inputs are). ``calibrating``: a
    quantizer that calibrates is among the candidates; otherwise every batch is the gate's."""
    if accuracy_inputs:
        given, described = user_inputs(module, accuracy_inputs), accuracy_inputs
    elif module.held_out:
        given, described = [dict(b) for b in module.held_out], f"the model's {len(module.held_out)} held-out inputs"
    else:
        batched = all(spec.batched for spec in module.schema.inputs)
        examples = module.examples(GATE_BATCH) if batched else dict(module.example_inputs)
        gated = [dict(module.example_inputs), *(random_inputs(examples, seed) for seed in range(GATE_SEEDS))]
        calibration = [random_inputs(examples, GATE_SEEDS + seed) for seed in range(GATE_SEEDS)]
        return calibration, gated, f"the example inputs and {GATE_SEEDS} seeded random variations"
    if not calibrating or len(given) < 2:
        return given, given, described
    calibration, gated = _split(given)
    return calibration, gated, f"{described} ({len(gated)} gated, {len(calibration)} calibrating)"
