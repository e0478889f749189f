"""A second, different model for multi-model tests."""

from __future__ import annotations

import torch

from engine import ModelSpec


class Affine(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x + 1


def affine() -> ModelSpec:
    return ModelSpec(Affine(), {"x": torch.zeros(1, 3)}, ("y",), name="affine")


class Wide(torch.nn.Module):
    """64 MB of float32 weights and a cheap forward: for tests of how processes share memory."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(*(torch.nn.Linear(2048, 2048) for _ in range(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


WIDE_WEIGHT_BYTES = 4 * (2048 * 2048 + 2048) * 4


def wide() -> ModelSpec:
    return ModelSpec(Wide(), {"x": torch.zeros(1, 2048)}, ("y",), name="wide")
