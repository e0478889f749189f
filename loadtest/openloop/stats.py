"""A run's report from its record: rates, status counts, latency percentiles and CDF."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from loadtest.openloop.schedule import Record, RunConfig

CDF_POINTS = 200


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    names = {"p50": 50, "p90": 90, "p95": 95, "p99": 99, "p99.9": 99.9}
    if values.size == 0:
        return {name: None for name in [*names, "max", "mean"]}
    out: dict[str, float | None] = {name: round(float(np.percentile(values, q)), 3) for name, q in names.items()}
    out["max"] = round(float(values.max()), 3)
    out["mean"] = round(float(values.mean()), 3)
    return out


def summarize(config: RunConfig, record: Record, t0: float, t_end: float) -> dict[str, Any]:
    start = t0 + config.warmup
    window = t_end - start
    intended = np.asarray(record.intended)
    sent = np.asarray(record.sent)
    done = np.asarray(record.done)
    status = np.asarray(record.status, dtype=np.int64)
    measured = intended >= start
    ok = measured & (status == 200)
    latency_ms = (done[ok] - intended[ok]) * 1e3
    started_measured = int(np.count_nonzero(np.asarray(record.started) >= start))
    counts = Counter(int(s) for s in status[measured])
    in_window = (done >= start) & (done <= t_end)
    cdf_q = np.linspace(0, 100, CDF_POINTS)
    report: dict[str, Any] = {
        "label": config.label,
        "mode": config.mode(),
        "payload": config.payload.path,
        "offered_rps": config.rate,
        "concurrency": config.concurrency,
        "connections": config.pool_size(),
        "duration_s": config.duration,
        "warmup_s": config.warmup,
        "sent_rps": round(float(np.count_nonzero((sent >= start) & (sent <= t_end))) / window, 1),
        "achieved_rps": round(float(np.count_nonzero(in_window & (status == 200))) / window, 1),
        "answered_rps": round(float(np.count_nonzero(in_window & (status != 0))) / window, 1),
        "requests": int(np.count_nonzero(measured)),
        "ok": int(np.count_nonzero(ok)),
        "rejected_503": counts.get(503, 0),
        "other_status": {str(k): v for k, v in sorted(counts.items()) if k not in (0, 200, 503)},
        "connection_errors": counts.get(0, 0),
        "error_kinds": dict(record.errors),
        "unanswered": started_measured - int(np.count_nonzero(measured)),
        "latency_ms": percentiles(latency_ms),
        "latency_from": "intended send time" if config.mode() == "open" else "send time",
        "cdf_ms": [round(float(v), 3) for v in np.percentile(latency_ms, cdf_q)] if latency_ms.size else [],
    }
    if config.mode() == "open":
        report["send_lag_ms"] = percentiles((sent[measured] - intended[measured]) * 1e3)
    return report
