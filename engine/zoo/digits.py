"""The built-in default model: a small CNN that classifies 8x8 handwritten digits.

Trained by ``python -m inferpool.engine.zoo.train_digits`` on scikit-learn's bundled digits data
(no download). The weights ship next to this file, so serving needs neither sklearn nor
the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from inferpool.engine.models.spec import ModelSpec

WEIGHTS = Path(__file__).with_name("digits_cnn.pt")
HELD_OUT_FILE = Path(__file__).with_name("digits_held_out.jsonl")
"""The 360 test images of ``train_digits.split`` (never trained on), one ``{"image": [[[...]]]}``
a line, in the format ``runtime.accuracy_inputs`` reads: the int8 gate's own held-out inputs."""
# sklearn's digits are 0..16 grey levels; the model scales them itself so that clients can
# send the data exactly as the dataset (and a scanner) produces it.
MAX_PIXEL = 16.0


class DigitsCNN(nn.Module):
    """[B, 1, 8, 8] pixel values in 0..16 -> (probabilities [B, 10], label [B])."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def logits(self, image: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features(image / MAX_PIXEL))
        return logits

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probabilities = torch.softmax(self.logits(image), dim=1)
        return probabilities, probabilities.argmax(dim=1)


def held_out_inputs() -> list[dict[str, np.ndarray]]:
    """Each held-out image as a one-image call, as a request sends it."""
    lines = HELD_OUT_FILE.read_text("utf-8").splitlines()
    return [{"image": np.asarray(json.loads(line)["image"], dtype=np.float32)[None]} for line in lines if line]


def build() -> ModelSpec:
    """Factory named by the default config: ``inferpool.engine.zoo.digits:build``."""
    model = DigitsCNN()
    model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
    return ModelSpec(
        module=model,
        example_inputs={"image": torch.zeros(1, 1, 8, 8)},
        output_names=("probabilities", "label"),
        name="digits",
        held_out=held_out_inputs(),
    )
