"""loadtest.bench timeline: a process's calls and a request's phases, read back from console spans."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from loadtest.bench.timeline import process_summary, requests_of, spans_in, table

T0 = 1_800_000_000.0  # seconds since the epoch


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def span(trace: str, name: str, start: float, end: float, pid: int = 7, **attributes: object) -> dict[str, object]:
    kind = "SpanKind.SERVER" if name == "POST /v2" else "SpanKind.INTERNAL"
    return {
        "name": name, "context": {"trace_id": trace, "span_id": "1"}, "kind": kind, "start_time": stamp(start),
        "end_time": stamp(end), "attributes": attributes, "resource": {"attributes": {"process.pid": pid}},
    }  # fmt: skip


def request(trace: str, at: float, call: tuple[float, float], rows: int) -> list[dict[str, object]]:
    """A request arriving ``at`` (ms), decoded 1 ms later, run in ``call``, encoded 0.5 ms after it."""
    ms = 1e-3
    start, end = call[0] * ms, call[1] * ms
    return [
        span(trace, "POST /v2", at * ms, end + 1.0 * ms, **{"inferpool.batch_size": rows}),
        span(trace, "decode", at * ms, (at + 1) * ms),
        span(trace, "queue", (at + 1) * ms, start),
        span(trace, "inference", start, end),
        span(trace, "encode", end + 0.5 * ms, end + 0.75 * ms),
    ]


def log_text() -> str:
    spans = [
        *request("a", 0.0, (2.0, 27.0), rows=2),
        *request("b", 0.5, (2.0, 27.0), rows=2),  # shared a's call
        *request("c", 28.0, (30.0, 45.0), rows=1),  # alone, 3 ms after the pair's call ended
    ]
    lines = ["INFO ready", *(json.dumps(s, indent=4) for s in spans), "{not a span", "INFO bye"]
    return "\n".join(lines) + "\n"


def test_the_spans_are_found_among_the_log_lines_and_grouped_by_request():
    found = requests_of(spans_in(log_text()), (T0, T0 + 1.0))
    assert sorted(r.rows for r in found) == [1, 2, 2]
    assert {r.pid for r in found} == {7}
    phases = next(r for r in found if r.rows == 1).phases()
    assert phases["in"] == pytest.approx(1e-3, abs=1e-6)
    assert phases["queued"] == pytest.approx(1e-3, abs=1e-6)  # decoded at 29 ms, its call at 30
    assert phases["call"] == pytest.approx(15e-3, abs=1e-6)
    assert phases["back"] == pytest.approx(0.5e-3, abs=1e-6)
    assert phases["out"] == pytest.approx(0.25e-3, abs=1e-6)


def test_requests_whose_calls_began_together_shared_one_call():
    found = requests_of(spans_in(log_text()), (T0, T0 + 1.0))
    summary = process_summary(found, seconds=0.1)
    assert summary["calls"] == 2
    assert summary["calls_by_rows"] == {1: 1, 2: 1}
    assert summary["requests_in_one_sample_calls"] == pytest.approx(1 / 3)
    assert summary["busy"] == pytest.approx((25e-3 + 15e-3) / 0.1)
    assert summary["gap_ms_median"] == pytest.approx(3.0, abs=1e-3)


def test_requests_answered_outside_the_window_are_left_out():
    assert requests_of(spans_in(log_text()), (T0 + 0.040, T0 + 1.0)) != []
    assert [r.rows for r in requests_of(spans_in(log_text()), (T0 + 0.040, T0 + 1.0))] == [1]


def test_the_table_has_a_row_per_process():
    summary = process_summary(requests_of(spans_in(log_text()), (T0, T0 + 1.0)), seconds=0.1)
    lines = table({7: summary}).splitlines()
    assert len(lines) == 3
    assert lines[2].startswith("| 7 | 2 (1: 1, 2: 1) | 0.33 | 0.40 | 3.00 / 3.00 | 1.00 / ")
