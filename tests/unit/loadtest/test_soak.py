"""The soak's classifier (loadtest.soak_mix) and figures (loadtest.soak), without a server.

Each of the answers below must count as a failure, or the soak proves nothing."""

from __future__ import annotations

import httpx2

from loadtest import soak, soak_mix


def response(status: int, body: bytes = b"", **headers: str) -> httpx2.Response:
    return httpx2.Response(status, content=body, headers=headers)


def test_the_classifier_flags_wrong_answers():
    labels = dict(enumerate(range(16)))
    single = soak_mix.Call("POST", "/predict", soak_mix.OK, images=[3], single=True, answer="predict")
    error = b'{"error": "internal server error"}'
    assert soak_mix.check(single, response(200, b'{"outputs": {"label": 3}}'), labels) is None
    assert "expected [3]" in str(soak_mix.check(single, response(200, b'{"outputs": {"label": 4}}'), labels))
    assert "unreadable" in str(soak_mix.check(single, response(200, b'{"outputs": {}}'), labels))
    assert "status 500" in str(soak_mix.check(single, response(500, error), labels))
    assert "status 503" in str(soak_mix.check(single, response(503, error, **{"Retry-After": "1"}), labels))

    late = soak_mix.Call("POST", "/predict", soak_mix.DEADLINE)
    assert soak_mix.check(late, response(504, b'{"error": "deadline"}'), labels) is None
    assert soak_mix.check(late, response(503, b'{"error": "late"}', **{"Retry-After": "1"}), labels) is None
    assert "Retry-After" in str(soak_mix.check(late, response(503, b'{"error": "late"}'), labels))
    assert "without a JSON body" in str(soak_mix.check(late, response(504, b"Gateway Timeout"), labels))
    assert "status 200" in str(soak_mix.check(late, response(200, b'{"outputs": {"label": 3}}'), labels))

    unknown = soak_mix.Call("POST", "/predict/nope", frozenset({404}))
    assert "without an error message" in str(soak_mix.check(unknown, response(404, b'{"detail": "x"}'), labels))


def test_the_end_figure_is_the_median_of_the_last_samples():
    series = [{"rss_kb": kb} for kb in (100, 90, 200, 104, 106, 300)]
    figures = soak._figures(series, "rss_kb")
    assert figures == {"start": 100, "end": 106, "max": 300, "growth_pct": 6.0}
