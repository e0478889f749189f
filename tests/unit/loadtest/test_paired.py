"""loadtest.paired: each served window against the bare windows either side of it."""

from __future__ import annotations

import pytest

from loadtest.paired import pairs, summary


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
