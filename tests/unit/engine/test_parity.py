"""The one parity rule every backend's load-time check uses (inferpool.engine.backends.parity)."""

from __future__ import annotations

import numpy as np

from inferpool.engine.backends.parity import Tolerance, first_mismatch, random_inputs, same

LOOSE = Tolerance(rtol=1e-3, atol=1e-5)


def test_floats_within_the_tolerance_agree_and_beyond_it_do_not():
    want = np.array([1.0, 2.0], dtype=np.float32)
    assert same(want * (1 + 5e-4), want, LOOSE)
    assert not same(want * (1 + 5e-3), want, LOOSE)


def test_everything_but_floats_must_be_equal_and_shapes_and_dtypes_must_match():
    labels = np.array([3, 7])
    assert same(labels.copy(), labels, LOOSE)
    assert not same(np.array([3, 8]), labels, LOOSE)  # no tolerance for a label
    assert not same(labels.astype(np.int32), labels, LOOSE)
    assert not same(np.zeros((1, 2), np.float32), np.zeros(2, np.float32), LOOSE)


def test_first_mismatch_names_the_output():
    good, bad = np.zeros(2, np.float32), np.ones(2, np.float32)
    assert first_mismatch(["a", "b"], [good, good], [good, good], LOOSE) is None
    assert first_mismatch(["a", "b"], [good, bad], [good, good], LOOSE) == "b"


def test_random_inputs_replace_floats_only_and_are_seeded():
    inputs: dict[str, np.ndarray] = {"x": np.zeros((2, 3), np.float32), "ids": np.arange(4)}
    first, again = random_inputs(inputs), random_inputs(inputs)
    assert first["x"].dtype == np.float32
    assert first["x"].std() > 0.1
    np.testing.assert_array_equal(first["x"], again["x"])
    assert first["ids"] is inputs["ids"]
