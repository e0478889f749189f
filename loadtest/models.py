"""Models used only by benchmarks."""

from __future__ import annotations

import torch

from inferpool.engine import ModelSpec


class Echo(torch.nn.Module):
    """Returns its image, so that a large tensor travels both ways (codec benchmarks)."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return image + 0.0


def image_echo() -> ModelSpec:
    return ModelSpec(Echo(), {"image": torch.zeros(1, 3, 224, 224)}, ("image_out",), name="echo")
