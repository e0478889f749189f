"""A deadline under the model's floor (its fastest call at start-up) is a 400 naming the field;
the floor in whole ms; and the spec's pattern for "an integer of at least the floor"."""

from __future__ import annotations

import re
import time

import pytest

from inferpool.engine.plan.deadline_floor import PATH_SECONDS, DeadlineFloor
from inferpool.engine.plan.wide import WideChoice
from inferpool.service.apierror import ApiError
from inferpool.service.timing import at_least_pattern, deadline


def test_a_header_under_the_floor_is_a_400_that_says_what_to_send():
    with pytest.raises(ApiError) as error:
        deadline(b"2", 1000.0, floor_ms=7)
    assert error.value.status == 400
    assert str(error.value) == (
        "X-Request-Timeout-Ms 2 is below this model's fastest measured call (7 ms); send at least 7 or omit it"
    )
    when = deadline(b"7", 1000.0, floor_ms=7)
    assert when is not None
    assert when <= time.monotonic() + 0.007


def test_a_v2_timeout_under_the_floor_is_a_400_in_its_own_unit():
    with pytest.raises(ApiError) as error:
        deadline(None, 1000.0, override_ms=6.999, floor_ms=7)
    assert error.value.status == 400
    assert str(error.value) == (
        "parameter 'timeout' 6999 µs is below this model's fastest measured call (7 ms); send at least 7000 or omit it"
    )
    assert deadline(None, 1000.0, override_ms=7.0, floor_ms=7) is not None


def test_a_header_under_the_floor_is_refused_even_when_the_v2_parameter_wins():
    with pytest.raises(ApiError, match=r"X-Request-Timeout-Ms 3 is below"):
        deadline(b"3", 1000.0, override_ms=50.0, floor_ms=7)


def test_no_request_deadline_is_not_held_to_the_floor():
    """The server's own default (request_timeout_ms) is the operator's: never refused."""
    when = deadline(None, 2.0, floor_ms=7)
    assert when is not None
    assert deadline(None, 0.0, floor_ms=7) is None


@pytest.mark.parametrize("floor", [1, 2, 7, 9, 10, 19, 20, 21, 99, 100, 250, 999, 1000, 4096])
def test_the_pattern_takes_exactly_the_integers_from_the_floor(floor):
    pattern = re.compile(at_least_pattern(floor))
    taken = [n for n in range(6000) if pattern.fullmatch(str(n))]
    assert taken == list(range(floor, 6000))
    assert pattern.fullmatch("9" * 19)
    for refused in ("0" + str(floor), "+" + str(floor), "1" + "0" * 19, "", f"{floor}.0"):
        assert not pattern.fullmatch(refused), refused


def floor_ms(call_seconds: list[float], wide: WideChoice | None = None) -> int:
    return DeadlineFloor.measured(call_seconds, wide=wide).ms()


def test_the_floor_is_the_fastest_call_rounded_up_to_whole_ms():
    assert floor_ms([0.0071, 0.0062, 0.0080]) == 7
    assert floor_ms([0.0068]) == 7  # float noise (0.0068 + 0.0002 s is not exactly 7 ms) is not 8
    assert floor_ms([0.00002]) == 1  # never under 1 ms
    assert floor_ms([0.0201, 0.0203]) == 21


def test_a_wide_lane_that_a_lone_call_may_take_lowers_the_floor():
    lane = WideChoice(2, True, "faster", narrow_ms=9.5, wide_ms=5.2, min_rows=1)
    assert floor_ms([0.0095], lane) == 6
    # Off, or only for larger calls: a one-sample call never runs on it.
    assert floor_ms([0.0095], WideChoice(2, False, "slower", narrow_ms=9.5, wide_ms=5.2)) == 10
    assert floor_ms([0.0095], WideChoice(2, True, "faster", narrow_ms=9.5, wide_ms=5.2, min_rows=8)) == 10


def test_more_samples_raise_the_floor_by_the_full_batch_s_slope():
    floor = DeadlineFloor.measured([0.0002, 0.0003], full=(8, 0.0009))  # digits on eager: 0.2 ms, 8 in 0.9 ms
    assert floor.ms(1) == 1
    assert floor.ms(8) == 2  # 0.9 ms of call and the path around it: 1 ms is missed, 2 is not
    assert floor.seconds(64) == pytest.approx(0.0002 + 63 * 0.0001 + PATH_SECONDS)
    flat = DeadlineFloor.measured([0.0095], full=(8, 0.0070))  # a full batch faster than one: no slope below 0
    assert flat.ms(8) == flat.ms(1) == 10
    assert DeadlineFloor.measured([0.0095]).ms(32) == 10  # no full batch timed (unbatched inputs)


def test_a_forked_process_s_faster_calls_lower_the_floor_but_keep_the_slope():
    floor = DeadlineFloor.measured([0.010], full=(8, 0.017)).faster([0.006, 0.008])
    assert floor.one_seconds == 0.006
    assert floor.per_sample_seconds == pytest.approx(0.001)
