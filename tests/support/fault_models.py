"""Models that misbehave on purpose, for fault tests (served via ``--model tests.support.fault_models:...``)."""

from __future__ import annotations

import torch

from inferpool.engine import ModelSpec
from inferpool.engine.zoo.digits import build as build_digits

POISON = -1.0  # a pixel value the digits data never has


class RaisesOnPoison(torch.nn.Module):
    """The digits CNN, except that an image containing POISON makes it raise."""

    def __init__(self) -> None:
        super().__init__()
        self.digits = build_digits().module

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if bool((image == POISON).any()):
            raise RuntimeError("poisoned input (raised on purpose by a test model)")
        return self.digits(image)


def raising() -> ModelSpec:
    spec = build_digits()
    return ModelSpec(RaisesOnPoison(), spec.example_inputs, spec.output_names, name="digits")
