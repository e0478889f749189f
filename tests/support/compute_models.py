"""A compute-bound model small enough to export in seconds, with a small input (a JSON body that
costs little to send): 3x3 convolutions on a 128x64x64 activation (~2.4 GMAC a call, ~100 ms
on one core: each operator long enough for two threads to split well), for the tests of the wide lane."""

from __future__ import annotations

import torch

from inferpool.engine import ModelSpec


def conv_stack() -> ModelSpec:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(4, 128, 3, padding=1), torch.nn.ReLU()]
    for _ in range(4):
        layers += [torch.nn.Conv2d(128, 128, 3, padding=1), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    return ModelSpec(model, {"x": torch.zeros(1, 4, 64, 64)}, ("features",), name="convstack")
