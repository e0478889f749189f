"""The int8 accuracy gate's arithmetic: int8 outputs against fp32's, item by item.

Two kinds of output, told apart by fp32's values: a classifier's (integer labels, or float rows
that are probability distributions: non-negative, summing to 1, more than one class) is judged by
top-1 agreement, the share of items whose label (argmax) is fp32's, with the largest change of a
probability reported beside it; any other float output (an embedding, logits, a regression) by
the cosine of each item's row to fp32's, every item at least ``accuracy_min_cosine``. A cosine
over a softmax row would pass a flipped top-1 between two close classes and fail a harmless
shift among a thousand tiny ones, which is why probabilities are judged as labels. An output of
one number per item (a cross-encoder's relevance score) has no row to take a cosine of -- one
number's cosine is its sign -- so a call of several items is judged by the cosine of its column,
the call's scores as one vector (a rerank's ranking signal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PROBABILITY_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class GateFigures:
    """int8 against fp32 on the gate's inputs."""

    items: int
    min_cosine: float | None
    """Least cosine over items of non-classifier float outputs; None without such outputs."""
    mean_cosine: float | None
    max_abs_diff: float
    agreement: float | None
    """Top-1 agreement: share of items whose labels (integer outputs, argmax of probabilities)
    are fp32's; None without classifier outputs."""
    max_prob_diff: float | None = None
    """Largest |int8 - fp32| of a probability; None without probability outputs."""


@dataclass(frozen=True)
class Gate:
    figures: GateFigures
    min_cosine: float
    min_agreement: float
    inputs: str
    method: str = "dynamic"
    """The quantization measured (inferpool.engine.backends.quantize.QUANTIZERS)."""

    @property
    def passed(self) -> bool:
        f = self.figures
        return (f.min_cosine is None or f.min_cosine >= self.min_cosine) and (
            f.agreement is None or f.agreement >= self.min_agreement
        )

    def describe(self) -> str:
        f = self.figures
        parts = []
        if f.min_cosine is not None:
            parts.append(f"min cosine {f.min_cosine:.4f} (needs {self.min_cosine}), mean {f.mean_cosine:.4f}")
        if f.agreement is not None:
            parts.append(f"top-1 agreement {f.agreement:.4f} (needs {self.min_agreement})")
        if f.max_prob_diff is not None:
            parts.append(f"max |Δp| {f.max_prob_diff:.3g}")
        over = f"max |diff| {f.max_abs_diff:.3g} over {f.items} items of {self.inputs}"
        return f"{self.method}: {', '.join([*parts, over])}"


def _rows(array: np.ndarray, batched: bool) -> np.ndarray:
    array = np.asarray(array, dtype=np.float64)
    return array.reshape(array.shape[0], -1) if batched and array.ndim > 0 else array.reshape(1, -1)


def is_probabilities(rows: np.ndarray) -> bool:
    """Rows of a softmax: a classifier's output, judged by top-1 agreement."""
    return (
        rows.ndim == 2
        and rows.shape[1] > 1
        and bool(np.all(rows >= 0))
        and bool(np.all(np.abs(rows.sum(axis=1) - 1) <= PROBABILITY_SUM_TOLERANCE))
    )


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norm_a, norm_b = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both_zero = (norm_a == 0) & (norm_b == 0)
    return np.where(both_zero, 1.0, np.sum(a * b, axis=1) / np.maximum(norm_a * norm_b, 1e-30))


def measure(fp32: Sequence[Sequence[np.ndarray]], int8: Sequence[Sequence[np.ndarray]], batched: bool) -> GateFigures:
    """Per batch, per output: cosine per item of float outputs, top-1 agreement of classifier ones."""
    cosines: list[np.ndarray] = []
    agreements: list[np.ndarray] = []  # per batch: does every label of each item agree
    worst, worst_p = 0.0, None
    for want_outputs, got_outputs in zip(fp32, int8, strict=True):
        agree: np.ndarray | None = None
        for want, got in zip(want_outputs, got_outputs, strict=True):
            a, b = _rows(want, batched), _rows(got, batched)
            if np.asarray(want).dtype.kind != "f":
                equal = (a == b).all(axis=1)
            elif is_probabilities(a):
                equal = a.argmax(axis=1) == b.argmax(axis=1)
                worst_p = max(worst_p or 0.0, float(np.max(np.abs(a - b), initial=0.0)))
            elif a.shape[1] == 1 and len(a) > 1:
                cosines.append(_cosines(a.T, b.T))  # one number per item: the call's column
                equal = None
            else:
                cosines.append(_cosines(a, b))
                equal = None
            if np.asarray(want).dtype.kind == "f":
                worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)))
            if equal is not None:
                agree = equal if agree is None or len(agree) != len(equal) else agree & equal
        if agree is not None:
            agreements.append(agree)
    every = np.concatenate(cosines) if cosines else None
    labels = np.concatenate(agreements) if agreements else None
    items = max(0 if every is None else len(every), 0 if labels is None else len(labels))
    return GateFigures(
        items,
        None if every is None else float(every.min()),
        None if every is None else float(every.mean()),
        worst,
        None if labels is None else float(labels.mean()),
        worst_p,
    )
