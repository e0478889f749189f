"""ResNet-50 (He et al. 2015, the torchvision layout) with seeded random weights: the compute-bound
vision workload of the benchmarks, written out here so that nothing is downloaded and no
torchvision is needed. ~25.6 M parameters, ~4.1 GFLOPs per 224x224 image: a call takes tens of
milliseconds on one core, three orders of magnitude longer than the digits CNN's.

    inferpool serve --model loadtest.resnet:build      # input "image": float32 [batch, 3, 224, 224]
"""

from __future__ import annotations

import torch
from torch import nn

from inferpool.engine import ModelSpec

SEED = 50
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, first stride


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )  # fmt: skip
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inplanes != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        ]  # fmt: skip
        inplanes = 64
        for width, blocks, stride in STAGES:
            for index in range(blocks):
                layers.append(Bottleneck(inplanes, width, stride if index == 0 else 1))
                inplanes = width * Bottleneck.expansion
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(inplanes, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(image), 1), 1)), 1)


def build() -> ModelSpec:
    torch.manual_seed(SEED)
    model = ResNet50().eval()
    # Random BatchNorm statistics as well, so that no layer is an identity the compilers could fold away.
    for norm in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        assert norm.running_mean is not None  # track_running_stats
        assert norm.running_var is not None
        norm.running_mean.uniform_(-0.1, 0.1)
        norm.running_var.uniform_(0.5, 1.5)
    return ModelSpec(model, {"image": torch.zeros(1, 3, 224, 224)}, ("probabilities",), name="resnet50")
