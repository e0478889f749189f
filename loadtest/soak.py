"""A bounded soak: mixed valid and invalid traffic from several clients against the real server.

    python -m loadtest.soak [--seconds 60] [--clients 6] [--json PATH]

Starts ``inferpool serve`` (the built-in digits model) on a free 127.0.0.1 port, warms it up
with every kind of request (excluded from the figures), then runs ``--clients`` threads, each
with one keep-alive connection, for ``--seconds`` or ``--max-requests`` requests, whichever
comes first. The mix: valid single samples and batches to ``/predict`` and the v2 infer route
(JSON and binary tensors); invalid bodies (bad JSON, wrong shape, strings, a body over
``--max-body-bytes``, unknown models); requests with a deadline too short to meet (503 or 504
expected); ``GET /metrics`` and ``/health/ready``.

Every response is classified against the status its kind expects. A different status (any
500, any 5xx but a deadline's 503/504), a connection error, an error without a JSON
``{"error": ...}`` body, or a 200 with a wrong answer (each image's label is learned in the
warm-up; a mismatch would mean answers crossed between requests) is a failure.

The server's RSS (``/proc/PID/status`` VmRSS), thread count (``/proc/PID/task``) and open file
descriptors (``/proc/PID/fd``), each summed over its process tree, are sampled after the warm-up and every
``--sample-every`` seconds; the end figure is the median of the last three samples, taken
while the clients still run (so both ends see the same open connections). Prints a JSON
summary; exits 1 if any response was unexpected.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from inferpool.harness.server import Server, run_server, wait_ready
from loadtest.procs import Sampler, tree_counts
from loadtest.soak_mix import FACTORIES, IMAGES, KINDS, MAX_BODY_BYTES, MIX, WEIGHTS, Call, check

END_SAMPLES = 3  # the end figure is the median of this many last samples
MAX_FAILURE_EXAMPLES = 20


@dataclass
class Tally:
    """What the clients saw; appended to under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    failures: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    sent: int = 0

    def take(self, cap: int) -> bool:
        with self.lock:
            if self.sent >= cap:
                return False
            self.sent += 1
            return True

    def record(self, kind: str, status: str, seconds: float, problem: str | None, detail: str = "") -> None:
        with self.lock:
            self.statuses[kind][status] += 1
            self.latencies[kind].append(seconds)
            if problem is not None:
                self.failures += 1
                if len(self.examples) < MAX_FAILURE_EXAMPLES:
                    self.examples.append({"kind": kind, "status": status, "problem": problem, "body": detail[:300]})


def send(http: httpx2.Client, call: Call) -> httpx2.Response:
    content: bytes | Iterator[bytes] | None = call.content
    if call.chunked and call.content is not None:
        body = call.content
        content = (body[i : i + 8192] for i in range(0, len(body), 8192))
    return http.request(call.method, call.path, content=content, headers=call.headers)


def client_loop(
    http: httpx2.Client, rng: random.Random, labels: dict[int, int], tally: Tally, stop_at: float, cap: int
) -> None:
    while time.monotonic() < stop_at and tally.take(cap):
        kind = rng.choices(KINDS, WEIGHTS)[0]
        attempt(http, kind, FACTORIES[kind](rng), labels, tally)


def attempt(http: httpx2.Client, kind: str, call: Call, labels: dict[int, int], tally: Tally) -> None:
    started = time.perf_counter()
    try:
        response = send(http, call)
    except httpx2.HTTPError as exc:
        tally.record(kind, "error", time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
        return
    elapsed = time.perf_counter() - started
    problem = check(call, response, labels)
    tally.record(kind, str(response.status_code), elapsed, problem, response.text if problem else "")


def learn_labels(http: httpx2.Client) -> dict[int, int]:
    response = http.post("/predict", json={"inputs": IMAGES.tolist()})
    response.raise_for_status()
    return dict(enumerate(response.json()["outputs"]["label"]))


def warm_up(clients: list[httpx2.Client], labels: dict[int, int], seconds: float, seed: int) -> dict[str, Any]:
    """Every kind at least once from every client, then the mix for ``seconds``; unexpected
    answers here already count (returned), but nothing enters the figures."""
    tally = Tally()
    for n, http in enumerate(clients):
        rng = random.Random(seed - 1 - n)
        for kind, _, factory in MIX:
            attempt(http, kind, factory(rng), labels, tally)
    run_clients(clients, labels, tally, seconds, 10**9, seed - 1000)
    requests = sum(sum(c.values()) for c in tally.statuses.values())
    return {"requests": requests, "failures": tally.failures, "failure_examples": tally.examples}


def run_clients(
    clients: list[httpx2.Client], labels: dict[int, int], tally: Tally, seconds: float, cap: int, seed: int
) -> None:
    stop_at = time.monotonic() + seconds
    threads = [
        threading.Thread(target=client_loop, args=(http, random.Random(seed + n), labels, tally, stop_at, cap))
        for n, http in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def metrics_size(http: httpx2.Client) -> dict[str, int]:
    """Bytes and series in /metrics: a label taken from the raw path would make both grow."""
    text = http.get("/metrics").text
    return {"bytes": len(text), "series": sum(1 for line in text.splitlines() if line and line[0] != "#")}


def _figures(samples: list[dict[str, Any]], key: str) -> dict[str, float]:
    start = samples[0][key]
    end = statistics.median(s[key] for s in samples[-END_SAMPLES:])
    return {"start": start, "end": end, "max": max(s[key] for s in samples), "growth_pct": 100 * (end - start) / start}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def soak(
    server: Server,
    seconds: float,
    clients: int,
    warmup: float = 5.0,
    sample_every: float = 2.0,
    max_requests: int = 500_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the soak against a running server; returns the summary."""
    if not server.url.startswith("http://127.0.0.1:"):
        raise ValueError(f"the soak only talks to 127.0.0.1, not {server.url}")
    pid = server.process.pid
    http_clients = [httpx2.Client(base_url=server.url, timeout=10.0) for _ in range(clients)]
    try:
        labels = learn_labels(http_clients[0])
        warm = warm_up(http_clients, labels, warmup, seed)
        metrics_start = metrics_size(http_clients[0])

        tally = Tally()
        sampler = Sampler(pid, sample_every, tree_counts)
        sampler.start()
        # Clients stop a little after the last sample, so every sample sees the same traffic.
        run_clients(http_clients, labels, tally, seconds, max_requests, seed)
        elapsed = time.monotonic() - sampler.started_at
        samples = sampler.stop()
        metrics_end = metrics_size(http_clients[0])
        after = tree_counts(pid)
    finally:
        for http in http_clients:
            http.close()

    log = server.output().splitlines()
    log_problems = [line for line in log if "Traceback" in line or "ERROR" in line or "unhandled" in line]
    total = sum(sum(c.values()) for c in tally.statuses.values())
    every = [s for kind in tally.latencies.values() for s in kind]
    return {
        "config": {
            "seconds": seconds,
            "clients": clients,
            "warmup_seconds": warmup,
            "sample_every_seconds": sample_every,
            "max_requests": max_requests,
            "max_body_bytes": MAX_BODY_BYTES,
            "seed": seed,
        },
        "warmup": warm,
        "duration_s": round(elapsed, 2),
        "requests": total,
        "rps": round(total / elapsed, 1),
        "failures": tally.failures,
        "failure_examples": tally.examples,
        "by_kind": {kind: dict(sorted(tally.statuses[kind].items())) for kind in KINDS if kind in tally.statuses},
        "latency_ms": {
            kind: {
                "p50": round(1e3 * _percentile(values, 0.5), 2),
                "p99": round(1e3 * _percentile(values, 0.99), 2),
                "max": round(1e3 * max(values), 2),
            }
            for kind, values in sorted(tally.latencies.items())
        }
        | {"all": {"p50": round(1e3 * _percentile(every, 0.5), 2), "p99": round(1e3 * _percentile(every, 0.99), 2)}},
        "process": {
            "pid": pid,
            "samples": len(samples),
            "rss_kb": _figures(samples, "rss_kb"),
            "threads": _figures(samples, "threads"),
            "fds": _figures(samples, "fds"),
            "after_clients_stopped": after,
            "series": samples,
        },
        "metrics_text": {"start": metrics_start, "end": metrics_end},
        "server_log": {"lines": len(log), "problems": len(log_problems), "examples": log_problems[:10]},
    }


def run(seconds: float, clients: int, warmup: float = 5.0, sample_every: float = 2.0, **kw: Any) -> dict[str, Any]:
    """Start a server, soak it, stop it."""
    with tempfile.TemporaryDirectory(prefix="inferpool-soak-") as logs:
        args = ("--max-body-bytes", str(MAX_BODY_BYTES))
        with run_server(Path(logs), *args) as server:
            wait_ready(server)
            summary = soak(server, seconds, clients, warmup, sample_every, **kw)
        summary["config"]["server_args"] = list(args)
        summary["server_exit_code"] = server.process.returncode
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--sample-every", type=float, default=2.0)
    parser.add_argument("--max-requests", type=int, default=500_000, help="stop after this many requests in all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    ns = parser.parse_args()
    if not 0 < ns.seconds <= 3600 or not 1 <= ns.clients <= 32:
        parser.error("--seconds must be in (0, 3600] and --clients in [1, 32]")
    summary = run(ns.seconds, ns.clients, ns.warmup, ns.sample_every, max_requests=ns.max_requests, seed=ns.seed)
    text = json.dumps(summary, indent=2)
    print(text)
    if ns.json:
        ns.json.write_text(text + "\n")
    raise SystemExit(1 if summary["failures"] or summary["warmup"]["failures"] else 0)


if __name__ == "__main__":
    main()
