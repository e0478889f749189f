"""A bounded soak of the real server: mixed valid and invalid traffic from several keep-alive
clients, then no unexpected answer, no growth in threads or open fds, RSS growth under 5 %.

30 s of traffic by default (about 45 s in all); ``INFERPOOL_SOAK_SECONDS=300`` for a longer one.
"""

from __future__ import annotations

import json
import os

import httpx2
import pytest

from loadtest import soak

SECONDS = float(os.environ.get("INFERPOOL_SOAK_SECONDS", "30"))
CLIENTS = 4
WARMUP = 3.0
DEADLINE_KINDS = {"tiny_timeout", "v2_tiny_timeout"}


@pytest.fixture(scope="module")
def summary():
    result = soak.run(SECONDS, CLIENTS, warmup=WARMUP, sample_every=2.0)
    print(json.dumps(result, indent=1))  # shown when a test fails, or with -s
    return result


def test_every_answer_is_the_expected_one(summary):
    assert summary["warmup"]["failures"] == 0, json.dumps(summary["warmup"]["failure_examples"], indent=1)
    assert summary["failures"] == 0, json.dumps(summary["failure_examples"], indent=1)
    assert set(summary["by_kind"]) == set(soak.KINDS), "every kind of request must have been sent"
    assert summary["requests"] >= 10 * SECONDS, "too few requests to call it a soak"
    for kind, statuses in summary["by_kind"].items():
        codes = {int(status) for status in statuses}  # a connection error ("error") fails here too
        assert all(code < 500 for code in codes - {503, 504}), (kind, statuses)
        if kind in DEADLINE_KINDS:
            assert codes <= {503, 504}, (kind, statuses)
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


# The classifier itself: each of these answers must count as a failure, or the soak proves nothing.


def response(status: int, body: bytes = b"", **headers: str) -> httpx2.Response:
    return httpx2.Response(status, content=body, headers=headers)


def test_the_classifier_flags_wrong_answers():
    labels = dict(enumerate(range(16)))
    single = soak.Call("POST", "/predict", soak.OK, images=[3], single=True, answer="predict")
    error = b'{"error": "internal server error"}'
    assert soak.check(single, response(200, b'{"outputs": {"label": 3}}'), labels) is None
    assert "expected [3]" in str(soak.check(single, response(200, b'{"outputs": {"label": 4}}'), labels))
    assert "unreadable" in str(soak.check(single, response(200, b'{"outputs": {}}'), labels))
    assert "status 500" in str(soak.check(single, response(500, error), labels))
    assert "status 503" in str(soak.check(single, response(503, error, **{"Retry-After": "1"}), labels))

    late = soak.Call("POST", "/predict", soak.DEADLINE)
    assert soak.check(late, response(504, b'{"error": "deadline"}'), labels) is None
    assert soak.check(late, response(503, b'{"error": "late"}', **{"Retry-After": "1"}), labels) is None
    assert "Retry-After" in str(soak.check(late, response(503, b'{"error": "late"}'), labels))
    assert "without a JSON body" in str(soak.check(late, response(504, b"Gateway Timeout"), labels))
    assert "status 200" in str(soak.check(late, response(200, b'{"outputs": {"label": 3}}'), labels))

    unknown = soak.Call("POST", "/predict/nope", frozenset({404}))
    assert "without an error message" in str(soak.check(unknown, response(404, b'{"detail": "x"}'), labels))


def test_the_end_figure_is_the_median_of_the_last_samples():
    series = [{"rss_kb": kb} for kb in (100, 90, 200, 104, 106, 300)]
    figures = soak._figures(series, "rss_kb")
    assert figures == {"start": 100, "end": 106, "max": 300, "growth_pct": 6.0}
