"""RuntimeOptions: every value is checked at construction and a bad one names the fix."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from inferpool.engine.backends import BACKENDS, AotiInterface
from inferpool.engine.options import AUTO_CANDIDATES, REMOVED, RuntimeOptions


def test_the_defaults_are_valid_and_frozen():
    options = RuntimeOptions()
    assert options.backend == "auto"
    assert options.aoti_interface == AotiInterface.MINIMAL_ARRAYREF
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.backend = "eager"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_runtimes": -1}, "num_runtimes=-1 is invalid: use 0 for automatic or a positive count"),
        ({"intra_op_threads": 0}, "intra_op_threads=0 is invalid: use 1 or more"),
        ({"max_request_samples": 0}, "max_request_samples=0 is invalid: use 1 or more"),
        ({"warmup_iters": -1}, "warmup_iters=-1 is invalid: use 0 to skip warm-up"),
        ({"borrow_timeout": 0}, "borrow_timeout=0.0 is invalid: use a positive number of seconds"),
        ({"dispatch": "fast"}, "dispatch='fast' is invalid: use one of"),
        ({"max_batch_size": -1}, "max_batch_size=-1 is invalid: use 0 to let start-up choose, 1 to turn batching off"),
        ({"max_queue_delay_us": -1}, "max_queue_delay_us=-1.0 is invalid: use a non-negative number"),
        (
            {"max_batch_size": 8, "preferred_batch_sizes": (4, 16)},
            r"preferred_batch_sizes=\(4, 16\) is invalid: use sizes between 1 and max_batch_size \(8\)",
        ),
        ({"compiled_batch_sizes": (0, 8)}, r"compiled_batch_sizes=\(0, 8\) is invalid: use positive batch sizes"),
        (
            {"aoti_interface": "ctypes"},
            r"aoti_interface='ctypes' is invalid: use one of \['minimal_arrayref', 'loader'\]",
        ),
        (
            {"max_batch_size": 4, "dispatch": "inline"},
            "dispatch='inline' is invalid: batching runs on worker threads",
        ),
    ],
)
def test_a_bad_value_names_the_option_and_the_fix(changes, message):
    with pytest.raises(ValidationError, match=message):
        RuntimeOptions(**changes)


def test_every_aoti_interface_is_accepted_by_its_string():
    for interface in AotiInterface:
        assert RuntimeOptions(aoti_interface=interface.value).aoti_interface == interface


def test_auto_backends_must_name_known_backends_once():
    assert RuntimeOptions(auto_backends=("eager", "aoti")).auto_backends == ("eager", "aoti")
    with pytest.raises(ValidationError, match=r"auto_backends=\('eager', 'tensorrt'\) is invalid: use names from"):
        RuntimeOptions(auto_backends=("eager", "tensorrt"))
    with pytest.raises(ValidationError, match="each once"):
        RuntimeOptions(auto_backends=("eager", "eager"))
    assert set(AUTO_CANDIDATES) <= set(BACKENDS)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_option_says_what_to_do_instead(name):
    with pytest.raises(ValidationError, match=f"{name} was removed: "):
        RuntimeOptions(**{name: 1})  # type: ignore[arg-type]


def test_an_unknown_option_is_refused():
    with pytest.raises(ValidationError, match="intra_op_thread"):
        RuntimeOptions(intra_op_thread=2)  # type: ignore[call-arg]


def test_replace_checks_again():
    with pytest.raises(ValidationError, match="intra_op_threads=0 is invalid"):
        dataclasses.replace(RuntimeOptions(), intra_op_threads=0)
