"""API-key and CORS settings, without the app: what the configuration accepts and shows."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inferpool.config import load_settings

KEY = "s3cret-key"


def test_the_key_never_appears_in_the_effective_config():
    assert KEY not in load_settings(None, ["--api-key", KEY]).model_dump_json()


def test_wildcard_origin_is_refused():
    with pytest.raises(ValidationError, match="must be an explicit origin"):
        load_settings(None, ["--cors-origins", '["*"]'])
