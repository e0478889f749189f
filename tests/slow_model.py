"""A test model whose factory takes a while, to observe readiness while loading."""

from __future__ import annotations

import time

from engine import ModelSpec
from engine.zoo.digits import build as build_digits

LOAD_SECONDS = 1.5


def build() -> ModelSpec:
    time.sleep(LOAD_SECONDS)
    return build_digits()
