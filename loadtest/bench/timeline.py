"""Where a serving process's time goes between its model calls, from the server's own trace spans.

    python -m loadtest.bench timeline [--workload resnet50] [--connections 4] [--seconds 8]

Starts the workload's no-flag server with ``--tracing`` and the console exporter (every request
sampled), runs wrk, stops it (the spans flush) and reads the spans back (docs/observability.md):
each request's ``inference`` span is its model call, and requests whose calls began at the same
instant in the same process shared one. Prints per serving process: its calls and their sizes,
how busy its calls kept it, the gap between one call's end and the next one's start, and each
request's phases (median, ms): in (decode), queued until its call (queue and batch), the call,
back to the event loop, encode, and the answer out. Exporting every span to the console costs
CPU beside the model: ResNet-50 at 4 connections ran 102 req/s traced against ~140 untraced, with
more one-sample calls (0.33 of the requests against 0.14). Read the make-up of a gap and a
request's phases, not the rate.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from loadtest.bench import case_parser

PHASES = ("in", "queued", "call", "back", "encode", "out")
"""A request's phases, in order (``Request.phases``)."""


def timeline_parser() -> argparse.ArgumentParser:
    parser = case_parser("timeline", __doc__)
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    return parser


@dataclass
class Request:
    """One traced request's spans: name -> (start, end) in seconds since the epoch."""

    pid: int
    rows: int
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)

    def complete(self) -> bool:
        return all(name in self.spans for name in ("server", "decode", "queue", "inference", "encode"))

    def phases(self) -> dict[str, float]:
        s = self.spans
        queued_until = s["batch"][1] if "batch" in s else s["queue"][1]
        return {
            "in": s["decode"][1] - s["server"][0],
            "queued": queued_until - s["decode"][1],
            "call": s["inference"][1] - s["inference"][0],
            "back": s["encode"][0] - s["inference"][1],
            "encode": s["encode"][1] - s["encode"][0],
            "out": s["server"][1] - s["encode"][1],
        }


def spans_in(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects the console exporter printed, among the log's other lines."""
    decoder = json.JSONDecoder()
    at = text.find("\n{")
    while at >= 0:
        try:
            found, end = decoder.raw_decode(text, at + 1)
        except json.JSONDecodeError:
            at = text.find("\n{", at + 1)
            continue
        if isinstance(found, dict) and "name" in found and "start_time" in found:
            yield found
        at = text.find("\n{", end)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def requests_of(spans: Iterator[dict[str, Any]], window: tuple[float, float]) -> list[Request]:
    """Traced requests whose answer went out within ``window``, with all their phases."""
    by_trace: dict[str, Request] = {}
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        trace = span["context"]["trace_id"]
        if span.get("kind") == "SpanKind.SERVER":
            attributes = span.get("attributes", {})
            pid = int(span["resource"]["attributes"]["process.pid"])
            request = by_trace[trace] = Request(pid, int(attributes.get("inferpool.batch_size", 1)))
            request.spans["server"] = (_seconds(span["start_time"]), _seconds(span["end_time"]))
        elif span["name"] != "inferpool.batch":
            children[trace].append(span)
    for trace, request in by_trace.items():
        for span in children.get(trace, ()):
            request.spans[span["name"]] = (_seconds(span["start_time"]), _seconds(span["end_time"]))
    low, high = window
    return [r for r in by_trace.values() if r.complete() and low <= r.spans["server"][1] <= high]


def process_summary(requests: list[Request], seconds: float) -> dict[str, Any]:
    """One process's calls (requests whose calls began at the same instant shared one) and phases."""
    calls: dict[float, tuple[float, int, int]] = {}
    for request in requests:
        start, end = request.spans["inference"]
        _, count, _ = calls.get(start, (end, 0, 0))
        calls[start] = (end, count + 1, request.rows)
    ordered = sorted(calls.items())
    gaps = [later[0] - earlier[1][0] for earlier, later in itertools.pairwise(ordered)]
    sizes: dict[int, int] = defaultdict(int)
    for _, (_, _, rows) in ordered:
        sizes[rows] += 1
    phases = {name: statistics.median(r.phases()[name] for r in requests) for name in PHASES}
    return {
        "requests": len(requests),
        "calls": len(ordered),
        "calls_by_rows": dict(sorted(sizes.items())),
        "requests_in_one_sample_calls": sum(1 for r in requests if r.rows == 1) / len(requests),
        "busy": sum(end - start for start, (end, _, _) in ordered) / seconds,
        "gap_ms_median": statistics.median(gaps) * 1e3 if gaps else None,
        "gap_ms_p90": sorted(gaps)[int(len(gaps) * 0.9)] * 1e3 if gaps else None,
        "phase_ms_median": {name: round(value * 1e3, 3) for name, value in phases.items()},
    }


def timeline(argv: list[str] | None = None) -> dict[int, dict[str, Any]]:
    args = timeline_parser().parse_args(argv)
    from inferpool.harness.payloads import PAYLOADS
    from inferpool.harness.server import inferpool_serve, launch
    from loadtest import wrk
    from loadtest.workloads import WORKLOADS

    workload = WORKLOADS[args.workload]
    payload = PAYLOADS[workload.payload_name]()
    scratch = Path(tempfile.mkdtemp(prefix="timeline-"))
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "200",
           "OTEL_BSP_MAX_QUEUE_SIZE": "200000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"}  # fmt: skip
    with launch(inferpool_serve(*workload.args, "--tracing"), scratch, name="traced", env=env) as server:
        pid = server.process.pid
        wrk.run_one(server.url, payload, args.connections, duration=args.warmup, warmup=0.0, label="warm-up",
                    server_pid=pid, scratch=scratch)  # fmt: skip
        window = (time.time(), 0.0)
        run = wrk.run_one(server.url, payload, args.connections, duration=args.seconds, warmup=0.0, label="traced",
                          server_pid=pid, scratch=scratch)  # fmt: skip
        window = (window[0], time.time())
    seconds = window[1] - window[0]
    found = requests_of(spans_in(server.output()), window)
    by_pid: dict[int, list[Request]] = defaultdict(list)
    for request in found:
        by_pid[request.pid].append(request)
    summaries = {pid: process_summary(requests, seconds) for pid, requests in sorted(by_pid.items())}
    print(f"{args.workload}, {args.connections} connections, {run['achieved_rps']:.1f} req/s traced "
          f"({len(found)} requests read back over {seconds:.1f} s)")  # fmt: skip
    print(table(summaries))
    print(json.dumps(summaries))
    return summaries


def table(summaries: dict[int, dict[str, Any]]) -> str:
    """One Markdown row per serving process."""
    lines = [
        f"| process | calls (by samples) | one-sample share | busy | gap p50 / p90 ms | {' / '.join(PHASES)} ms |",
        "|---|---|---|---|---|---|",
    ]
    for pid, found in summaries.items():
        sizes = ", ".join(f"{rows}: {count}" for rows, count in found["calls_by_rows"].items())
        gap = "n/a" if found["gap_ms_median"] is None else f"{found['gap_ms_median']:.2f} / {found['gap_ms_p90']:.2f}"
        phases = " / ".join(f"{found['phase_ms_median'][name]:.2f}" for name in PHASES)
        lines.append(
            f"| {pid} | {found['calls']} ({sizes}) | {found['requests_in_one_sample_calls']:.2f} | "
            f"{found['busy']:.2f} | {gap} | {phases} |"
        )
    return "\n".join(lines)
