"""One parity check for every backend: its outputs against the eager model's on the same inputs.

A backend that compiles, exports or traces the model can be wrong in ways nothing else notices
(a shape specialised to the example, an op exported differently, a package of another model):
each checks itself at load, so that such a model fails to start instead of answering wrongly.
The rule is the same everywhere: same shape and dtype; floats within the backend's own
``Runtime.tolerance``; everything else (labels, indices, masks) exactly equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from inferpool.engine.models.module import InferenceModule, flatten_outputs
from inferpool.engine.schema import Array


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


def eager_outputs(module: InferenceModule, inputs: Mapping[str, Array]) -> list[np.ndarray]:
    """The eager model's outputs on ``inputs`` (in the schema's input order), as arrays."""
    with torch.inference_mode():
        outputs = flatten_outputs(module.module(*(torch.from_numpy(np.asarray(a)) for a in inputs.values())))
    return [t.numpy() for t in outputs]


def same(ours: np.ndarray, theirs: np.ndarray, tolerance: Tolerance) -> bool:
    ours = np.asarray(ours)
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return False
    if theirs.dtype.kind == "f":
        return bool(np.allclose(ours, theirs, rtol=tolerance.rtol, atol=tolerance.atol))
    return bool(np.array_equal(ours, theirs))


def first_mismatch(
    names: Sequence[str], got: Sequence[np.ndarray], want: Sequence[np.ndarray], tolerance: Tolerance
) -> str | None:
    """The name of the first output that differs, or None when all agree."""
    for name, ours, theirs in zip(names, got, want, strict=True):
        if not same(ours, theirs, tolerance):
            return name
    return None


def random_inputs(inputs: Mapping[str, Array], seed: int = 0) -> dict[str, Array]:
    """Seeded random floats in the inputs' shapes (other dtypes kept): example inputs are often
    all zeros, which would let a package of another model with the same shapes and biases, or a
    trace blind to its data, pass."""
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else a for k, a in inputs.items()}
