"""More models that misbehave on purpose, for the engine's fault tests (tests/unit/engine/test_faults.py).

Each is the digits CNN except on samples containing POISON (a pixel value the data never has).
"""

from __future__ import annotations

import time

import torch

from inferpool.engine import ModelSpec
from inferpool.engine.zoo.digits import build as build_digits
from tests.support.fault_models import POISON

SLOW_SECONDS = 0.3


class Faulty(torch.nn.Module):
    """``mode`` says what a poisoned sample does: "nan" (its probabilities row becomes NaN,
    the other rows stay correct), "exit" (SystemExit: ends the thread that runs it), or
    "slow" (sleeps SLOW_SECONDS, then answers correctly)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.digits = build_digits().module

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        poisoned = (image == POISON).flatten(1).any(dim=1)
        if bool(poisoned.any()):
            if self.mode == "exit":
                raise SystemExit("poisoned input (SystemExit raised on purpose by a test model)")
            if self.mode == "slow":
                time.sleep(SLOW_SECONDS)
        probabilities, label = self.digits(image.clamp(min=0))
        if self.mode == "nan":
            probabilities = torch.where(poisoned[:, None], torch.nan, probabilities)
        return probabilities, label


def faulty(mode: str) -> ModelSpec:
    spec = build_digits()
    return ModelSpec(Faulty(mode), spec.example_inputs, spec.output_names, name="digits")
