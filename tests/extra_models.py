"""A second, different model for multi-model tests."""

from __future__ import annotations

import torch

from engine import ModelSpec


class Affine(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x + 1


def affine() -> ModelSpec:
    return ModelSpec(Affine(), {"x": torch.zeros(1, 3)}, ("y",), name="affine")
