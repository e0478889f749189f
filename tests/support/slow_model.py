"""A test model whose factory takes a while, to observe readiness while loading."""

from __future__ import annotations

import time

import torch

from inferpool.engine import ModelSpec
from inferpool.engine.zoo.digits import build as build_digits

LOAD_SECONDS = 1.5


def build() -> ModelSpec:
    time.sleep(LOAD_SECONDS)
    return build_digits()


CALL_SECONDS = 0.02


class Sleepy(torch.nn.Module):
    """The digits CNN, 20 ms slower per call: keeps requests in flight for drain tests."""

    def __init__(self, seconds: float = CALL_SECONDS) -> None:
        super().__init__()
        self.digits = build_digits().module
        self.seconds = seconds

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.seconds)
        return self.digits(image)


def slow_calls() -> ModelSpec:
    spec = build_digits()
    return ModelSpec(Sleepy(), spec.example_inputs, spec.output_names, name="digits")


QUEUED_CALL_SECONDS = 0.5


def queued_calls() -> ModelSpec:
    """The digits CNN at 500 ms a call: requests wait in its queue long enough to watch them there."""
    spec = build_digits()
    return ModelSpec(Sleepy(QUEUED_CALL_SECONDS), spec.example_inputs, spec.output_names, name="digits")


class Late(torch.nn.Module):
    """The digits CNN, 20 ms slower on an image whose first pixel is positive: its start-up
    calls (on zeros) are fast, so its deadline floor is 1 ms, and a request can ask for a
    deadline at or above the floor that it then misses (a 504, not a 400)."""

    def __init__(self) -> None:
        super().__init__()
        self.digits = build_digits().module

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if bool(image.flatten()[0] > 0):
            time.sleep(CALL_SECONDS)
        return self.digits(image)


def late_calls() -> ModelSpec:
    spec = build_digits()
    return ModelSpec(Late(), spec.example_inputs, spec.output_names, name="digits")


SAMPLE_SECONDS = 0.005


class PerSample(torch.nn.Module):
    """The digits CNN, 5 ms slower per sample in the call: a model whose deadline floor grows with
    the request's sample count (inferpool.engine.plan.deadline_floor)."""

    def __init__(self) -> None:
        super().__init__()
        self.digits = build_digits().module

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SAMPLE_SECONDS * image.shape[0])
        return self.digits(image)


def per_sample_calls() -> ModelSpec:
    spec = build_digits()
    return ModelSpec(PerSample(), spec.example_inputs, spec.output_names, name="digits")


MATMULS = 24
"""Chained 1024 x 1024 matmuls: ~0.3 s a call on one onnxruntime thread here, ~12 ms each."""


class MatmulChain(torch.nn.Module):
    """A long call that onnxruntime can stop between two of its operators (the identity keeps
    every backend's answer exact, and nothing can fold a product that depends on the input)."""

    start: torch.Tensor
    step: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("start", torch.ones(1024, 1024))
        self.register_buffer("step", torch.eye(1024))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.start * x.mean()
        for _ in range(MATMULS):
            h = h @ self.step
        return x[:, :4] * h[:1, :4]  # a row per row (the tests send equal rows, so batching changes nothing)


def long_calls() -> ModelSpec:
    """A model whose call takes ~0.3 s on onnxruntime: long enough to watch one be stopped."""
    return ModelSpec(MatmulChain().eval(), {"x": torch.ones(1, 8)}, ("y",), name="chain")
