"""A compute-bound model small enough to export in seconds, with a small input (a JSON body that
costs little to send): 3x3 convolutions on a 128x32x32 activation (~0.6 GMAC a call, tens of ms
on one core), for the tests of the wide lane."""

from __future__ import annotations

import torch

from inferpool.engine import ModelSpec


def conv_stack() -> ModelSpec:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(4, 128, 3, padding=1), torch.nn.ReLU()]
    for _ in range(4):
        layers += [torch.nn.Conv2d(128, 128, 3, padding=1), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    return ModelSpec(model, {"x": torch.zeros(1, 4, 32, 32)}, ("features",), name="convstack")
