"""A second, different model for multi-model tests."""

from __future__ import annotations

import torch

from inferpool.engine import ModelSpec


class Affine(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x + 1


def affine() -> ModelSpec:
    return ModelSpec(Affine(), {"x": torch.zeros(1, 3)}, ("y",), name="affine")


class Wide(torch.nn.Module):
    """128 MB of float32 weights and a cheap forward: for tests of how processes share memory
    (twice a serving process's own heap, so that a copied set of weights cannot hide in it)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(*(torch.nn.Linear(2048, 2048) for _ in range(8)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


WIDE_WEIGHT_BYTES = 8 * (2048 * 2048 + 2048) * 4


def wide() -> ModelSpec:
    return ModelSpec(Wide(), {"x": torch.zeros(1, 2048)}, ("y",), name="wide")
