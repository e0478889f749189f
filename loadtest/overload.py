"""Overload: an open-loop load at a multiple of the server's capacity, and what it does to it.

    python -m loadtest.overload [--factor 3] [--seconds 30] [--deadline-ms 100]
                                [--payload digits-json] [--server-args ...] [--out DIR]

Starts ``inferpool serve`` on a free 127.0.0.1 port, pinned to CPU 1 (the generator runs on CPU
0, so the two do not fight for a core and the capacity is one core's), measures its capacity
with a closed loop of 8 connections, then offers ``--factor`` times that rate, open loop, for
``--seconds``, each request carrying ``X-Request-Timeout-Ms: --deadline-ms``. Meanwhile it samples
the server's RSS every 0.5 s. It reports, as JSON and one summary:

- answers by status (anything but 200, 503 and 504 is a failure);
- how fast a 503 comes back, from the moment the request was *sent* (the server's refusal
  time; the issue's bar is 5 ms) and from its *intended* time (what the client saw, generator
  lag included);
- admitted (200) latency p50/p99/max from the send time, and the share of admitted requests
  answered after their deadline (admission by predicted wait should keep it near 0);
- RSS at the start and end of the overload and its peak; whether the server still answers
  ``/health/live`` afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import numpy as np

from inferpool.harness.payloads import PAYLOADS
from inferpool.harness.server import inferpool_serve, launch
from loadtest.openloop.schedule import RunConfig, run
from loadtest.openloop.stats import percentiles
from loadtest.openloop.sweep import loop_runner
from loadtest.procs import tree_rss_bytes

SERVER_CPU, GENERATOR_CPU = 1, 0


class RssSampler(threading.Thread):
    """The server's process-tree RSS every ``interval`` seconds, as (seconds since start, MiB)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float]] = []
        self._finished = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self._finished.wait(self.interval):
            self.samples.append((round(time.monotonic() - started, 2), tree_rss_bytes(self.pid) / 2**20))

    def stop(self) -> list[tuple[float, float]]:
        self._finished.set()
        self.join()
        return self.samples


def capacity(url: str, payload_name: str) -> float:
    """Requests/s the server sustains under a closed loop of 8 connections (5 s, 1 s warm-up)."""
    config = RunConfig(url, PAYLOADS[payload_name](), duration=5, warmup=1, concurrency=8)
    with loop_runner() as runner:
        record, t0, t_end = runner.run(run(config))
    done, status = np.asarray(record.done), np.asarray(record.status)
    window = (done >= t0 + config.warmup) & (done <= t_end) & (status == 200)
    return float(np.count_nonzero(window)) / config.duration


def overload(url: str, payload_name: str, rate: float, seconds: float, deadline_ms: float) -> dict[str, Any]:
    payload = PAYLOADS[payload_name]()
    header = str(max(1, round(deadline_ms)))  # the header takes whole milliseconds
    payload = replace(payload, headers=(*payload.headers, ("x-request-timeout-ms", header)))
    # Enough connections for every request that may be in flight at once (the server answers
    # each within about its deadline), or the generator, not the server, would hold requests back.
    connections = max(8, min(1024, round(rate * deadline_ms / 1e3 * 2)))
    config = RunConfig(url, payload, duration=seconds, warmup=2, rate=rate, drain=5, connections=connections)
    with loop_runner() as runner:
        record, t0, _ = runner.run(run(config))
    intended, sent = np.asarray(record.intended), np.asarray(record.sent)
    done, status = np.asarray(record.done), np.asarray(record.status, dtype=np.int64)
    measured = intended >= t0 + config.warmup
    ok, rejected = measured & (status == 200), measured & (status == 503)
    admitted_ms = (done[ok] - sent[ok]) * 1e3
    counts = Counter(int(s) for s in status[measured])
    return {
        "offered_rps": round(rate, 1),
        "connections": connections,
        "requests": int(np.count_nonzero(measured)),
        "status": {str(k): v for k, v in sorted(counts.items())},
        "failures": sum(v for k, v in counts.items() if k not in (200, 503, 504)),
        "unanswered": len(record.started) - len(record.done),
        "admitted_rps": round(float(np.count_nonzero(ok)) / seconds, 1),
        "admitted_ms_from_send": percentiles(admitted_ms),
        "admitted_late_share": round(float(np.mean(admitted_ms > deadline_ms)), 5) if admitted_ms.size else None,
        "rejected_ms_from_send": percentiles((done[rejected] - sent[rejected]) * 1e3),
        "rejected_ms_from_intended": percentiles((done[rejected] - intended[rejected]) * 1e3),
        "send_lag_ms": percentiles((sent[measured] - intended[measured]) * 1e3),
        # When in the run slow refusals happened: a steady tail or a few stalls.
        "rejected_p99_ms_by_second": _by_second(intended[rejected] - t0, (done[rejected] - sent[rejected]) * 1e3),
    }


def _by_second(at: np.ndarray, values: np.ndarray) -> list[float | None]:
    seconds = at.astype(int)
    return [
        round(float(np.percentile(values[seconds == s], 99)), 1) if np.any(seconds == s) else None
        for s in range(int(seconds.max()) + 1 if seconds.size else 0)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factor", type=float, default=3.0, help="offered rate / measured capacity")
    parser.add_argument("--capacity", type=float, default=None, help="req/s; skips measuring it (to compare runs)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--deadline-ms", type=float, default=100.0)
    parser.add_argument("--payload", choices=sorted(PAYLOADS), default="digits-json")
    parser.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="extra `inferpool serve` args")
    parser.add_argument("--out", type=Path, default=None, help="write overload.json here")
    args = parser.parse_args()

    log_dir = args.out or Path("/tmp")
    log_dir.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {GENERATOR_CPU})
    with launch(inferpool_serve(*args.server_args), log_dir, name="inferpool", cpus=[SERVER_CPU]) as server:
        measured = args.capacity or capacity(server.url, args.payload)
        rss = RssSampler(server.process.pid)
        rss.start()
        report = overload(server.url, args.payload, args.factor * measured, args.seconds, args.deadline_ms)
        samples = rss.stop()
        live = httpx2.get(server.url + "/health/live", timeout=5).status_code
        metrics = httpx2.get(server.url + "/metrics", timeout=5).text
        reasons = {
            line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith(("inferpool_rejections_total{", "inferpool_failures_total{"))
        }
        report |= {
            "capacity_rps": round(measured, 1),
            "factor": args.factor,
            "deadline_ms": args.deadline_ms,
            "payload": args.payload,
            "server_args": args.server_args,
            "live_after": live,
            "server_refusals": reasons,
            "server_exited": server.process.poll() is not None,
            "rss_mb": {
                "start": round(samples[0][1], 1),
                "end": round(samples[-1][1], 1),
                "peak": round(max(mb for _, mb in samples), 1),
            },
            "rss_samples": [(t, round(mb, 1)) for t, mb in samples],
        }
    if args.out:
        (args.out / "overload.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "rss_samples"}, indent=2))


if __name__ == "__main__":
    main()
