"""The load generator's guards and the packaged scenarios, without a server."""

from __future__ import annotations

import pytest

from inferpool.harness.payloads import PAYLOADS, digits_json
from inferpool.harness.server import REPO_ROOT
from loadtest import openloop
from loadtest.run import load_scenario


def test_refuses_non_local_targets():
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        openloop.run_one(openloop.RunConfig("http://example.com:80", digits_json(), rate=1, duration=0.1))


def test_scenarios_parse():
    for path in sorted((REPO_ROOT / "loadtest" / "scenarios").glob("*.toml")):
        scenario = load_scenario(path)
        assert scenario["load"]["payload"] in PAYLOADS
        assert scenario["load"].get("rates") or scenario["load"].get("concurrency")
