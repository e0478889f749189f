"""The start-up advice on a KVM guest whose idle vCPUs halt at once (inferpool.engine.plan.halt_polling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferpool.engine.plan.halt_polling import ENOUGH_NS, advice


def machine(tmp_path: Path, driver: str | None, poll: str | None) -> tuple[Path, Path]:
    paths = tmp_path / "current_driver", tmp_path / "guest_halt_poll_ns"
    for path, text in zip(paths, (driver, poll), strict=True):
        if text is not None:
            path.write_text(text + "\n")
    return paths


def test_a_guest_that_halts_at_once_is_told_what_to_write_and_where(tmp_path):
    driver, poll = machine(tmp_path, "haltpoll", "0")
    said = advice(driver, poll)
    assert said is not None
    assert f"write {ENOUGH_NS * 2} to {poll}" in said
    assert "polling 0 us" in said


def test_a_short_poll_is_named_in_microseconds(tmp_path):
    said = advice(*machine(tmp_path, "haltpoll", "200000"))
    assert said is not None
    assert "polling 200 us" in said


@pytest.mark.parametrize(
    ("driver", "poll"),
    [
        ("haltpoll", str(ENOUGH_NS)),  # polls long enough already
        ("intel_idle", "0"),  # bare metal: no VM exit to save
        ("haltpoll", None),  # the parameter is not there
        (None, "0"),  # no cpuidle driver at all
        ("haltpoll", "lots"),  # unreadable: say nothing rather than guess
    ],
)
def test_elsewhere_it_says_nothing(tmp_path, driver, poll):
    assert advice(*machine(tmp_path, driver, poll)) is None
