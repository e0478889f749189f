"""QuickInputs, the inline path's check of a one-input float request: whatever it accepts, the
general check (Schema.coerce_inputs) accepts with the same arrays; everything else it leaves to
the general check (None), which answers or refuses as it always has."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from inferpool.engine import schema
from inferpool.engine.errors import InvalidInput
from inferpool.engine.schema import QuickInputs, Schema, TensorSpec, positional

IMAGE = TensorSpec("image", "float32", (None, 1, 2, 2))
SCHEMA = Schema(inputs=(IMAGE,), outputs=(TensorSpec("y", "float32", (None,)),))
MAX32 = float(np.finfo(np.float32).max)
ONE = [[[1.0, 2.0], [3.0, 4.0]]]

CASES = {
    "one sample as lists": ONE,
    "a batch as lists": [ONE, ONE, ONE],
    "integers": [[[1, 2], [3, 4]]],
    "named": {"image": [ONE]},
    "an array": np.ones((2, 1, 2, 2), np.float32),
    "a float64 array": np.ones((1, 2, 2)),
    "a strided array": np.ones((2, 1, 2, 4), np.float32)[..., ::2],
    "the largest float32": [[[MAX32, 0.0], [0.0, 0.0]]],
    "two of the largest float32": [[[MAX32, -MAX32], [0.0, 0.0]]],  # their squares' sum is past the bound
    "rounds to the largest float32": [[[MAX32 * (1 + 2**-26), 0.0], [0.0, 1.0]]],
    "out of float32's range": [[[1e39, 0.0], [0.0, 1.0]]],
    "NaN": [[[float("nan"), 0.0], [0.0, 1.0]]],
    "infinity": [[[float("inf"), 0.0], [0.0, 1.0]]],
    "wrong shape": [[[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]],
    "right size, wrong layout": [[1.0, 2.0, 3.0, 4.0]],
    "a batch of the wrong shape": [[[[1.0, 2.0]]]],
    "ragged": [[[1.0, 2.0], [3.0]]],
    "booleans": [[[True, False], [True, False]]],
    "strings": [[["1", "2"], ["3", "4"]]],
    "mixed strings and numbers": [[[1.0, "2"], [3.0, 4.0]]],
    "empty": [],
    "a scalar": 3.0,
    "wrong name": {"picture": ONE},
    "an extra name": {"image": ONE, "mask": ONE},
    "None inside": [[[None, 1.0], [2.0, 3.0]]],
}


def general(value: object, strict: bool) -> tuple[dict[str, np.ndarray], bool] | InvalidInput:
    try:
        return SCHEMA.coerce_inputs(positional(SCHEMA, value), strict=strict)
    except InvalidInput as exc:
        return exc


def test_a_bare_number_is_refused_by_the_numel_check_not_crashed_on():
    with pytest.raises(InvalidInput, match="has 1 elements; expected 4 per sample"):
        SCHEMA.coerce_inputs(positional(SCHEMA, 3.0), strict=False)


@pytest.mark.parametrize("strict", [True, False], ids=["check_inputs", "numel_only"])
@pytest.mark.parametrize("case", list(CASES))
def test_quick_accepts_only_what_the_general_check_accepts_and_gives_the_same_arrays(case, strict):
    quick = QuickInputs.of(SCHEMA)
    assert quick is not None
    value = CASES[case]
    found = quick(value)
    expected = general(value, strict)
    if found is None:
        return  # the general check decides: the caller takes its answer, error or not
    assert not isinstance(expected, InvalidInput), f"quick accepted what the general check refuses: {expected}"
    arrays, single = found
    want, want_single = expected
    assert single == want_single
    assert arrays.keys() == want.keys()
    for name, array in arrays.items():
        assert array.dtype == want[name].dtype
        assert array.shape == want[name].shape
        assert array.flags.c_contiguous
        np.testing.assert_array_equal(array, want[name])


@pytest.mark.parametrize(
    "case", ["one sample as lists", "a batch as lists", "integers", "named", "an array", "the largest float32"]
)
def test_the_common_requests_take_the_quick_path(case):
    quick = QuickInputs.of(SCHEMA)
    assert quick is not None
    assert quick(CASES[case]) is not None


@pytest.mark.parametrize("case", ["NaN", "infinity", "out of float32's range", "booleans", "strings", "wrong shape"])
def test_what_the_checks_refuse_is_left_to_the_general_check(case):
    quick = QuickInputs.of(SCHEMA)
    assert quick is not None
    assert quick(CASES[case]) is None


@pytest.mark.parametrize(
    "spec",
    [
        TensorSpec("x", "float16", (None, 4)),  # an integer above 65504 would overflow unseen
        TensorSpec("x", "int64", (None, 4)),
        TensorSpec("x", "float32", (4,)),  # no batch dimension
        TensorSpec("x", "float32", (None, None)),  # a free sample dimension
    ],
)
def test_schemas_it_cannot_check_take_the_general_path(spec):
    assert QuickInputs.of(Schema(inputs=(spec,), outputs=())) is None


def test_a_model_of_two_inputs_takes_the_general_path():
    two = Schema(inputs=(IMAGE, TensorSpec("mask", "float32", (None, 4))), outputs=())
    assert QuickInputs.of(two) is None


@pytest.mark.parametrize("value", [1e200, -1e300, 1.7e308])
def test_values_whose_squares_overflow_are_left_to_the_general_check_without_a_warning(value):
    quick = QuickInputs.of(SCHEMA)
    assert quick is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning would raise here
        assert quick([[[value, 0.0], [0.0, 1.0]]]) is None
        assert quick(np.full((1, 1, 2, 2), value)) is None


def test_a_float32_array_whose_squares_overflow_float32_is_left_to_the_general_check_without_a_warning():
    quick = QuickInputs.of(SCHEMA)
    assert quick is not None
    value = np.full((1, 1, 2, 2), 1e20, np.float32)  # in range, but its square is not a float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert quick(value) is None
    arrays, _ = general(value, strict=True)  # type: ignore[misc]
    np.testing.assert_array_equal(arrays["image"], value)


def test_an_overflow_warning_turned_error_leaves_the_request_to_the_general_check(monkeypatch):
    """Should a numpy ever warn on vdot's overflow (it does on dot's), -W error makes it raise."""

    def warns(*_: object) -> float:
        raise RuntimeWarning("overflow encountered in vdot")

    monkeypatch.setattr(schema, "_squares", warns)
    quick = QuickInputs.of(SCHEMA)
    assert quick is not None
    assert quick(ONE) is None
