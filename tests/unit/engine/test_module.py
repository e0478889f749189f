from __future__ import annotations

import numpy as np
import pytest

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, load_model


def test_schema_marks_the_dynamic_batch_dimension(digits_module):
    image = digits_module.schema.inputs[0]
    probabilities, label = digits_module.schema.outputs
    assert (image.name, image.dtype, image.shape) == ("image", "float32", (None, 1, 8, 8))
    assert (probabilities.name, probabilities.shape) == ("probabilities", (None, 10))
    assert (label.name, label.dtype, label.shape) == ("label", "int64", (None,))


def test_runtimes_share_the_weights_instead_of_copying_them(digits_module, options):
    runtimes = [BACKENDS["eager"](digits_module, options) for _ in range(4)]
    pointers = {p.data_ptr() for p in digits_module.module.parameters()}
    for runtime in runtimes:
        assert runtime.module is digits_module
        assert {p.data_ptr() for p in runtime.module.module.parameters()} == pointers
    assert not any(p.requires_grad for p in digits_module.module.parameters())
    assert not digits_module.module.training


def test_eager_runtime_matches_reference(digits_module, options, images, reference):
    runtime = BACKENDS["eager"](digits_module, options)
    got = runtime.run({"image": images})
    probabilities, label = reference(images)
    np.testing.assert_allclose(got["probabilities"], probabilities, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got["label"], label)


def test_torch_export_archive_serves_the_same_numbers(digits_pt2, images, reference, options):
    module = InferenceModule.from_spec(load_model(str(digits_pt2)))
    assert module.name == "digits"
    assert module.schema.inputs[0].shape == (None, 1, 8, 8)
    assert [s.shape for s in module.schema.outputs] == [(None, 10), (None,)]
    got = BACKENDS["eager"](module, options).run({"image": images})
    probabilities, label = reference(images)
    np.testing.assert_allclose(got[module.schema.outputs[0].name], probabilities, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[module.schema.outputs[1].name], label)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("no_such_package.mod:build", "cannot import model factory"),
        ("inferpool.engine.zoo.digits:missing", "cannot import model factory"),
        ("inferpool.engine.zoo.digits", "must look like 'package.module:function'"),
        ("inferpool.engine.zoo.digits:DigitsCNN", "returned DigitsCNN, not inferpool.engine.ModelSpec"),
        ("/nonexistent/model.pt2", "does not exist"),
    ],
)
def test_bad_model_sources_say_what_is_wrong(source, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(source)


def test_examples_at_a_batch_size_repeat_or_cut_the_example_rows(digits_module):
    one = digits_module.example_inputs["image"]
    for batch in (1, 3, 8):
        got = digits_module.examples(batch)["image"]
        assert got.shape == (batch, *one.shape[1:])
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got[0], one[0])
