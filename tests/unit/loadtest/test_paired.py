"""loadtest.paired: each served window against the bare windows either side of it."""

from __future__ import annotations

import pytest

from loadtest.paired import in_flight, pairs, summary


def test_a_served_window_is_held_to_the_mean_of_its_two_bare_neighbours():
    found = pairs([20.0, 22.0, 10.0], [21.0, 15.0])
    assert found[0]["ratio"] == pytest.approx(1.0)
    assert found[0]["steady"]
    assert found[1]["ratio"] == pytest.approx(15.0 / 16.0, abs=1e-3)
    assert not found[1]["steady"]  # the machine halved within the pair: 22 -> 10


def test_the_summary_leaves_unsteady_pairs_out_of_its_median_and_lowest():
    found = pairs([20.0, 20.0, 20.0, 10.0], [19.0, 20.0, 5.0])
    line = summary(4, found)
    assert line == "| 4 | 0.95 / 1.00 / 0.33* | 2 of 3 | 0.97 | 0.95 |"
    assert summary(1, pairs([20.0, 10.0], [15.0])) == "| 1 | 1.00* | no steady pair | | |"


class _Bare:
    """Records what ``in_flight`` asks the bare engine for; every setting's rate is its batch size."""

    cpus = 2

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def every_core(self, seconds: float, rows: int = 1) -> float:
        self.asked.append(("every core", rows))
        return 10.0 * rows

    def batched(self, seconds: float, rows: int) -> float:
        self.asked.append(("wide", rows))
        return 15.0 * rows


@pytest.mark.parametrize(
    ("connections", "asked"),
    [
        (4, [("every core", 2), ("wide", 4)]),  # four requests: two a core, or all four at once
        (3, [("every core", 1), ("wide", 3)]),
        (16, [("every core", 8), ("wide", 8)]),  # no batch larger than the server's own
    ],
)
def test_in_flight_times_no_batch_larger_than_the_connections_carry(connections, asked):
    bare = _Bare()
    rate = in_flight(bare, connections, 4.0)  # type: ignore[arg-type]
    assert bare.asked == asked
    assert rate == max(10.0 * asked[0][1], 15.0 * asked[1][1])
