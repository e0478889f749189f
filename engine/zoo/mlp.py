"""A small MLP (64 -> 256 -> 256 -> 10) with seeded random weights: the backend benchmarks'
and tests' second model, whose per-call cost is almost all framework overhead (three matmuls
of a few microseconds each), so it shows what a runtime adds around the kernels."""

from __future__ import annotations

import torch
from torch import nn

from inferpool.engine.models.spec import ModelSpec

SEED = 0


class MLP(nn.Module):
    """[B, 64] -> logits [B, 10]."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.layers(x)
        return logits


def build() -> ModelSpec:
    """``inferpool.engine.zoo.mlp:build``; the same weights on every call (fixed seed, no file)."""
    generator = torch.Generator().manual_seed(SEED)
    model = MLP()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * parameter.shape[-1] ** -0.5)
    return ModelSpec(module=model, example_inputs={"x": torch.zeros(1, 64)}, output_names=("logits",), name="mlp")
