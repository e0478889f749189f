"""The committed weights of the built-in model, on the held-out split they never saw."""

from __future__ import annotations

from inferpool.engine.zoo.digits import build
from inferpool.engine.zoo.train_digits import accuracy, split


def test_committed_digits_weights_reach_97_percent_held_out():
    _, _, test_x, test_y = split()
    assert len(test_y) == 360
    assert accuracy(build().module, test_x, test_y) >= 0.97
