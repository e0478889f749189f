"""A bounded soak of the real server: mixed valid and invalid traffic from several keep-alive
clients, then no unexpected answer, no growth in threads or open fds, RSS growth under 5 %.

30 s of traffic by default (about 45 s in all); ``INFERPOOL_SOAK_SECONDS=300`` for a longer one.
The classifier itself is checked without a server in tests/unit/loadtest/test_soak.py.
"""

from __future__ import annotations

import json
import os

import pytest

from loadtest import soak, soak_mix

SECONDS = float(os.environ.get("INFERPOOL_SOAK_SECONDS", "30"))
CLIENTS = 4
WARMUP = 3.0
TOO_SHORT_KINDS = {"tiny_timeout", "v2_tiny_timeout"}  # deadlines under 1 ms: a 400, never admitted


@pytest.fixture(scope="module")
def summary():
    result = soak.run(SECONDS, CLIENTS, warmup=WARMUP, sample_every=2.0)
    print(json.dumps(result, indent=1))  # shown when a test fails, or with -s
    return result


def test_every_answer_is_the_expected_one(summary):
    assert summary["warmup"]["failures"] == 0, json.dumps(summary["warmup"]["failure_examples"], indent=1)
    assert summary["failures"] == 0, json.dumps(summary["failure_examples"], indent=1)
    assert set(summary["by_kind"]) == set(soak_mix.KINDS), "every kind of request must have been sent"
    assert summary["requests"] >= 10 * SECONDS, "too few requests to call it a soak"
    for kind, statuses in summary["by_kind"].items():
        codes = {int(status) for status in statuses}  # a connection error ("error") fails here too
        assert all(code < 500 for code in codes - {503, 504}), (kind, statuses)
        if kind in TOO_SHORT_KINDS:
            assert codes == {400}, (kind, statuses)
        else:
            assert codes.isdisjoint({503, 504}), (kind, statuses)
    assert summary["server_log"]["problems"] == 0, summary["server_log"]["examples"]
    assert summary["server_exit_code"] == 0, "the server should drain and exit cleanly after the soak"


def test_no_growth_in_threads_fds_or_memory(summary):
    process = summary["process"]
    assert process["samples"] >= 5, process["series"]
    threads, fds, rss = process["threads"], process["fds"], process["rss_kb"]
    assert threads["end"] <= threads["start"] + 2, process["series"]
    # Each client holds one keep-alive connection on both ends; a 413 may cost a reconnect.
    assert fds["end"] <= fds["start"] + CLIENTS + 4, process["series"]
    assert rss["growth_pct"] < 5.0, process["series"]
    metrics = summary["metrics_text"]
    assert metrics["end"]["series"] <= metrics["start"]["series"] + 20, "a metric label grows with traffic"
