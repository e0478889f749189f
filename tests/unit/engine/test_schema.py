from __future__ import annotations

import numpy as np
import pytest

from inferpool.engine import InvalidInput, Schema, TensorSpec
from inferpool.engine.schema import positional

IMAGE = TensorSpec("image", "float32", (None, 1, 8, 8))
SCHEMA = Schema((IMAGE, TensorSpec("mask", "int64", (None, 3))), (TensorSpec("out", "float32", (None, 2)),))


def sample(fill: float = 1.0) -> list:
    return np.full((1, 8, 8), fill).tolist()


def test_one_sample_gains_a_batch_dimension():
    array, single = IMAGE.coerce(sample(), strict=True)
    assert single
    assert array.shape == (1, 1, 8, 8)
    assert array.dtype == np.float32
    assert array.flags.c_contiguous


def test_batch_is_kept_and_ints_widen_to_float():
    array, single = IMAGE.coerce([np.ones((1, 8, 8), dtype=int).tolist()] * 3, strict=True)
    assert not single
    assert array.shape == (3, 1, 8, 8)
    assert array.dtype == np.float32


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([[1.0, 2.0]], "has shape [1, 2]; expected [batch, 1, 8, 8]"),
        ([[[1.0] * 8] * 8, [[1.0] * 7] * 8], "not a rectangular array"),
        ([[["a"] * 8] * 8], "must hold float32 values, got strings"),
        ([], "is empty"),
        ([[[[True] * 8] * 8]], "must hold float32 values, got bool"),
        ([[[[1e39] * 8] * 8]], "out of range for float32"),
    ],
)
def test_bad_image_is_refused_with_a_message_naming_it(value, message):
    with pytest.raises(InvalidInput, match="input 'image'") as info:
        IMAGE.coerce(value, strict=True)
    assert message in str(info.value)
    assert info.value.input_name == "image"


def test_strict_mode_refuses_non_finite_values():
    with pytest.raises(InvalidInput, match="NaN or infinity"):
        IMAGE.coerce(np.full((1, 8, 8), np.nan), strict=True)


def test_floats_are_never_truncated_into_int_inputs():
    with pytest.raises(InvalidInput, match="must hold int64 values, got float64"):
        SCHEMA.inputs[1].coerce([[1.5, 2, 3]], strict=True)


def test_numel_mode_reshapes_any_layout_with_the_right_count():
    array, single = IMAGE.coerce(np.arange(128).reshape(2, 64).tolist(), strict=False)
    assert array.shape == (2, 1, 8, 8)
    assert not single
    np.testing.assert_array_equal(array.reshape(2, 64), np.arange(128).reshape(2, 64))
    with pytest.raises(InvalidInput, match="has 126 elements; expected 64 per sample"):
        IMAGE.coerce(np.zeros((2, 63)).tolist(), strict=False)


def test_request_must_name_exactly_the_model_inputs():
    with pytest.raises(InvalidInput, match=r"missing \['mask'\], unknown \['masks'\]"):
        SCHEMA.coerce_inputs({"image": sample(), "masks": [[1, 2, 3]]}, strict=True)


def test_inputs_must_share_one_batch_size():
    with pytest.raises(InvalidInput, match="same batch size"):
        SCHEMA.coerce_inputs({"image": [sample()] * 2, "mask": [[1, 2, 3]] * 3}, strict=True)


def test_bare_array_only_for_single_input_models():
    assert positional(Schema((IMAGE,), ()), [1]) == {"image": [1]}
    with pytest.raises(InvalidInput, match="several inputs"):
        positional(SCHEMA, [1])


def test_json_schema_describes_one_sample():
    schema = IMAGE.json_schema()
    assert schema["minItems"] == schema["maxItems"] == 1
    # Schema-valid numbers must also fit the dtype: up to what rounds to float32's largest value.
    bound = float(np.finfo(np.float32).max) + 2.0**103  # half the last step: rounds to infinity
    numbers = schema["items"]["items"]["items"]
    assert numbers == {"type": "number", "exclusiveMinimum": -bound, "exclusiveMaximum": bound}
    taken, refused = np.nextafter(bound, 0), bound
    assert np.isfinite(IMAGE.coerce([[[[taken] * 8] * 8]], strict=True)[0]).all()
    with pytest.raises(InvalidInput, match=r"out of range|NaN or infinity"):
        IMAGE.coerce([[[[refused] * 8] * 8]], strict=True)
    assert TensorSpec("mask", "int64", (None, 3)).json_schema()["items"] == {
        "type": "integer",
        "minimum": -(2**63),
        "maximum": 2**63 - 1,
    }
