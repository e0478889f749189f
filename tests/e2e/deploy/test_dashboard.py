"""Every query of deploy/monitoring/dashboard.json returns data from a real Prometheus (Debian's
binary, scrape every second) scraping a real ``inferpool serve`` after a little bounded load,
good requests and a few bad ones. The server has its response cache on (the load repeats its
samples: hits and misses) and two priority levels (every other request asks for the low one).
Only 127.0.0.1 is used; every wait is bounded."""

from __future__ import annotations

import math
import time
from urllib.parse import urlsplit

import httpx2

from inferpool.harness.server import run_server, wait_ready
from tests.support.dashboard import concrete, load, queries
from tests.support.prometheus import run_prometheus

GOOD = 300
INVALID_JSON = 5
TOO_LARGE = 3
MAX_BODY = 64 * 1024


def _send(http: httpx2.Client, images, good: int, invalid: int, large: int) -> None:
    for i in range(good):
        samples = images[i % 16 : i % 16 + 1 + i % 3].tolist()
        response = http.post("/predict", json={"inputs": samples}, headers={"X-Request-Priority": str(1 + i % 2)})
        assert response.status_code == 200, response.text
    for _ in range(invalid):
        assert http.post("/predict", content=b"{oops").status_code == 400
    for _ in range(large):
        assert http.post("/predict", content=b"x" * (2 * MAX_BODY)).status_code == 413


def _count(result) -> float:
    return sum(float(sample["value"][1]) for sample in result)


def test_every_dashboard_query_returns_data(tmp_path, images):
    traffic = ("--response-cache-mb", "1", "--priority-levels", "2")
    with run_server(tmp_path, "--max-body-bytes", str(MAX_BODY), *traffic) as server:
        wait_ready(server)
        target = urlsplit(server.url).netloc
        assert target.startswith("127.0.0.1:")
        with run_prometheus(tmp_path, [target], interval="1s") as prometheus:
            # A few scrapes of the idle server first: every series then has samples before the load.
            prometheus.wait_for('count_over_time(up{job="inferpool"}[1m])', lambda r: r and _count(r) >= 3, 30)
            assert _count(prometheus.query('up{job="inferpool"}')) == 1, prometheus.tail()
            ok = 'sum(inferpool_requests_total{route="/predict", status="200"})'
            with httpx2.Client(base_url=server.url, timeout=30) as http:
                # One of each first, until scraped: a counter's first sample is its baseline
                # (Prometheus counts no increase into it), so the bulk must come after.
                # Two good ones: each priority level's series starts before the bulk too.
                _send(http, images, 2, 1, 1)
                prometheus.wait_for(ok, lambda r: r and _count(r) == 2, 30)
                _send(http, images, GOOD - 2, INVALID_JSON - 1, TOO_LARGE - 1)
            prometheus.wait_for(ok, lambda r: r and _count(r) == GOOD, 30)
            time.sleep(2.5)  # two more scrapes after the load
            at = time.time()

            empty = []
            for name, expr in queries(load()):
                result = prometheus.query(concrete(expr), at=at)
                if not result:
                    empty.append(name)
                for sample in result:
                    assert not math.isnan(float(sample["value"][1])) or "histogram_quantile" in expr, (name, sample)
            assert not empty, f"no data for: {empty}"

            # And the numbers are the load's.
            rate = prometheus.query('sum(increase(inferpool_requests_total{route="/predict"}[60s]))', at=at)
            assert _count(rate) > GOOD / 2
            reasons = {s["metric"]["reason"] for s in prometheus.query("inferpool_failures_total", at=at)}
            assert "invalid_json" in reasons
            refused = {s["metric"]["reason"] for s in prometheus.query("inferpool_rejections_total", at=at)}
            assert "body_too_large" in refused
            latency = next(e for n, e in queries(load()) if n.startswith("Request latency"))
            assert all(0 < float(s["value"][1]) < 10 for s in prometheus.query(concrete(latency), at=at))
            errors = prometheus.query(concrete(next(e for n, e in queries(load()) if n.startswith("5xx ratio"))), at=at)
            assert [float(s["value"][1]) for s in errors] == [0.0]
