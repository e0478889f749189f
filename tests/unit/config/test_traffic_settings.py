"""The response cache's and priorities' settings (config/traffic.py): defaults off, and values
that cannot work refused at start-up with what to change."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inferpool.config import Settings


def test_off_by_default():
    settings = Settings()
    assert settings.response_cache_mb == 0
    assert settings.response_cache_models is None
    assert (settings.priority_levels, settings.default_priority) == (1, 1)


def test_a_default_beyond_the_levels_says_what_to_change():
    with pytest.raises(ValidationError, match="default_priority 3 is not a level: priority_levels is 2, so give"):
        Settings(priority_levels=2, default_priority=3)
    assert Settings(priority_levels=3, default_priority=3).default_priority == 3


OUT_OF_RANGE = [("priority_levels", 0), ("priority_levels", 17), ("default_priority", 0), ("response_cache_mb", -1)]


@pytest.mark.parametrize(("field", "value"), OUT_OF_RANGE)
def test_out_of_range_values_are_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})
