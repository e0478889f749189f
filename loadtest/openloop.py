"""Open-loop (constant arrival rate) and closed-loop load generator over raw keep-alive HTTP/1.1.

    python -m loadtest.openloop URL --rates 200,400,800 [--duration 10 --warmup 2]
    python -m loadtest.openloop URL --concurrency 1,8,64 [--duration 10 --warmup 2]
    options: --payload digits-json|digits-v2-binary|empty  --out DIR  --pin-cpu N  --server-pid PID

**Open loop**: request *i* is due at ``t0 + i / rate`` whatever happened to the earlier ones,
and its latency is measured from that *intended* time, so a server (or a generator) that falls
behind shows the queueing in its latencies instead of quietly sending less (no coordinated
omission, as in wrk2). The requests go over a pool of keep-alive connections sized to the
offered rate (``rate * --latency-budget``, 4 to ``--max-connections``), all opened before the
clock starts; each connection takes the next due request as soon as it is free, sleeps until
that request is due, sends it, and reads the answer. If every connection is busy when a request
falls due, it waits — and its latency counts that wait. ``send_lag`` (sent - intended) tells
how much of the latency is the generator's own: if its p99 is large, the generator (or the
pool) is the bottleneck, not the server.

**Closed loop**: ``--concurrency N`` keep-alive connections each send the next request as soon as
the last one is answered; latency from the actual send. A list sweeps the concurrency.

Requests whose intended time falls in the first ``--warmup`` seconds are sent but excluded. The
run is bounded: ``--duration`` seconds of schedule plus at most ``--drain`` seconds for answers
still in flight (those left are counted ``unanswered``), and ``--max-requests`` in all.

The client is asyncio streams (uvloop when installed) writing one pre-built request and parsing
just the status line, ``Content-Length`` (or chunked) and ``Connection: close``; against
``loadtest.tiny_server`` it costs 30-60 us of CPU per request and reaches ~20k req/s on one core.
It shares the machine with the server: its own CPU
time is reported (``generator_cpu``: ``getrusage`` over the run, in cores), and ``--pin-cpu``
pins it to one core (``os.sched_setaffinity``) so the server can be given the other.

Results: one JSON report (every run: offered/sent/achieved rate, p50/p90/p95/p99/p99.9/max,
status counts, errors, a 200-point latency CDF) and, when matplotlib is installed, PNGs of
latency vs throughput and of the latency CDFs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

CDF_POINTS = 200
SAMPLE = np.random.default_rng(0).integers(0, 17, size=(1, 8, 8)).astype(np.float32)


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class Payload:
    """What to send: a path, a body and extra headers (the host comes from the URL)."""

    path: str
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    method: str = "POST"

    def request(self, host: str, port: int) -> bytes:
        lines = [f"{self.method} {self.path} HTTP/1.1", f"host: {host}:{port}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        if self.body or self.method == "POST":
            lines.append(f"content-length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


def digits_json(path: str = "/predict") -> Payload:
    body = json.dumps({"inputs": SAMPLE.astype(int).tolist()}, separators=(",", ":")).encode()
    return Payload(path, body, (("content-type", "application/json"),))


def digits_v2_binary(model: str = "digits") -> Payload:
    header = json.dumps(
        {
            "inputs": [
                {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 256}}
            ],
            "outputs": [{"name": "label", "parameters": {"binary_data": True}}],
        },
        separators=(",", ":"),
    ).encode()
    headers = (("content-type", "application/octet-stream"), ("inference-header-content-length", str(len(header))))
    return Payload(f"/v2/models/{model}/infer", header + SAMPLE[None].tobytes(), headers)


SENTENCE = "InferPool serves a PyTorch model over HTTP on CPUs, fast and honest about it."


def minilm_json() -> Payload:
    """One sentence (~20 tokens: MiniLM's 32-token bucket) to ``config/minilm.toml``'s server."""
    body = json.dumps({"inputs": SENTENCE}).encode()
    return Payload("/predict", body, (("content-type", "application/json"),))


def minilm_v2_binary(model: str = "minilm") -> Payload:
    """The same sentence as a v2 ``BYTES`` tensor (Triton's 4-byte length prefix), binary outputs."""
    text = SENTENCE.encode()
    size = 4 + len(text)
    header = json.dumps(
        {
            "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": size}}],
            "parameters": {"binary_data_output": True},
        },
        separators=(",", ":"),
    ).encode()
    headers = (("content-type", "application/octet-stream"), ("inference-header-content-length", str(len(header))))
    return Payload(f"/v2/models/{model}/infer", header + len(text).to_bytes(4, "little") + text, headers)


PAYLOADS: dict[str, Callable[[], Payload]] = {
    "digits-json": digits_json,
    "digits-v2-binary": digits_v2_binary,
    "minilm-json": minilm_json,
    "minilm-v2-binary": minilm_v2_binary,
    "empty": lambda: Payload("/", method="GET"),
}


class Connection:
    """One keep-alive HTTP/1.1 connection: send a pre-built request, read one response."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def exchange(self, request: bytes) -> int:
        """Send ``request``, return the response's status once its body is read."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None
        assert self.writer is not None
        reader = self.reader
        self.writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at >= 0:
            length = int(lower[at + 17 : lower.index(b"\r\n", at + 2)])
            if length:
                await reader.readexactly(length)
        elif b"\r\ntransfer-encoding: chunked" in lower:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        else:  # no length: the body runs to the end of the connection
            await reader.read()
            self.close()
            return status
        if b"\r\nconnection: close" in lower:
            self.close()
        return status


# ---------------------------------------------------------------- one run


@dataclass
class _Record:
    intended: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)  # 0: connection error
    started: list[float] = field(default_factory=list)  # intended time of every request sent
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class RunConfig:
    url: str
    payload: Payload
    duration: float = 10.0
    warmup: float = 2.0
    rate: float | None = None  # open loop
    concurrency: int | None = None  # closed loop
    latency_budget: float = 0.05
    max_connections: int = 512
    connections: int | None = None
    drain: float = 10.0
    max_requests: int = 2_000_000
    label: str = ""

    def mode(self) -> str:
        return "open" if self.rate is not None else "closed"

    def pool_size(self) -> int:
        if self.concurrency is not None:
            return self.concurrency
        if self.connections is not None:
            return self.connections
        assert self.rate is not None
        return max(4, min(self.max_connections, math.ceil(self.rate * self.latency_budget)))


async def _run(config: RunConfig) -> tuple[_Record, float, float]:
    parts = urlsplit(config.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"load only goes to 127.0.0.1, not {host}")
    request = config.payload.request(host, port)
    connections = [Connection(host, port) for _ in range(config.pool_size())]
    await asyncio.gather(*(c.open() for c in connections))
    record = _Record()
    clock = time.perf_counter
    t0 = clock() + 0.05
    t_end = t0 + config.warmup + config.duration
    budget = [config.max_requests]
    next_index = [0]

    async def exchange(conn: Connection, intended: float) -> None:
        record.started.append(intended)
        sent = clock()
        try:
            status = await conn.exchange(request)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            record.errors[type(exc).__name__] += 1
            conn.close()
            status = 0
            await asyncio.sleep(0.001)  # a refused connection must not spin the loop
        record.intended.append(intended)
        record.sent.append(sent)
        record.done.append(clock())
        record.status.append(status)

    async def open_worker(conn: Connection) -> None:
        assert config.rate is not None
        interval = 1.0 / config.rate
        while budget[0] > 0:
            i = next_index[0]
            next_index[0] += 1
            intended = t0 + i * interval
            if intended >= t_end:
                return
            budget[0] -= 1
            # The loop's timers may fire up to a millisecond early (its clock resolution): sleep
            # again rather than send before the intended time (a CI run measured a 20 ms answer
            # as 18.9 ms from its intended time).
            while (delay := intended - clock()) > 0:
                await asyncio.sleep(delay)
            await exchange(conn, intended)

    async def closed_worker(conn: Connection) -> None:
        delay = t0 - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        while budget[0] > 0:
            now = clock()
            if now >= t_end:
                return
            budget[0] -= 1
            await exchange(conn, now)

    worker = open_worker if config.rate is not None else closed_worker
    tasks = [asyncio.ensure_future(worker(c)) for c in connections]
    _, pending = await asyncio.wait(tasks, timeout=t_end - clock() + config.drain)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for conn in connections:
        conn.close()
    return record, t0, t_end


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    names = {"p50": 50, "p90": 90, "p95": 95, "p99": 99, "p99.9": 99.9}
    if values.size == 0:
        return {name: None for name in [*names, "max", "mean"]}
    out: dict[str, float | None] = {name: round(float(np.percentile(values, q)), 3) for name, q in names.items()}
    out["max"] = round(float(values.max()), 3)
    out["mean"] = round(float(values.mean()), 3)
    return out


def summarize(config: RunConfig, record: _Record, t0: float, t_end: float) -> dict[str, Any]:
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
        "latency_ms": _percentiles(latency_ms),
        "latency_from": "intended send time" if config.mode() == "open" else "send time",
        "cdf_ms": [round(float(v), 3) for v in np.percentile(latency_ms, cdf_q)] if latency_ms.size else [],
    }
    if config.mode() == "open":
        report["send_lag_ms"] = _percentiles((sent[measured] - intended[measured]) * 1e3)
    return report


def _loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run_one(config: RunConfig, server_pid: int | None = None) -> dict[str, Any]:
    """Run one rate or concurrency; returns its report (with the generator's CPU use)."""
    from loadtest.procs import tree_cpu_seconds, tree_rss_bytes

    before = resource.getrusage(resource.RUSAGE_SELF)
    server_before = tree_cpu_seconds(server_pid) if server_pid else 0.0
    wall = time.perf_counter()
    with _loop_runner() as runner:
        record, t0, t_end = runner.run(_run(config))
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    report = summarize(config, record, t0, t_end)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    answered = max(1, len(record.done))
    report["generator_cpu"] = {
        "cores": round(cpu / wall, 3),
        "us_per_request": round(cpu / answered * 1e6, 1),
        "affinity": sorted(os.sched_getaffinity(0)),
    }
    if server_pid:
        report["server_cpu_cores"] = round((tree_cpu_seconds(server_pid) - server_before) / wall, 3)
        report["server_rss_mb"] = round(tree_rss_bytes(server_pid) / 2**20, 1)
    return report


def sweep(
    url: str,
    payload: Payload,
    *,
    rates: Sequence[float] = (),
    concurrencies: Sequence[int] = (),
    server_pid: int | None = None,
    label: str = "",
    **options: Any,
) -> list[dict[str, Any]]:
    runs = []
    for rate in rates:
        runs.append(run_one(RunConfig(url, payload, rate=rate, label=label, **options), server_pid))
    for concurrency in concurrencies:
        runs.append(run_one(RunConfig(url, payload, concurrency=concurrency, label=label, **options), server_pid))
    return runs


# ---------------------------------------------------------------- output


def brief(run: dict[str, Any]) -> str:
    lat = run["latency_ms"]
    load = f"rate {run['offered_rps']:>7}" if run["mode"] == "open" else f"conc {run['concurrency']:>4}"
    return (
        f"{run['label']:<24} {load}  achieved {run['achieved_rps']:>8.1f}/s  p50 {lat['p50']} p99 {lat['p99']} "
        f"max {lat['max']} ms  503 {run['rejected_503']}  err {run['connection_errors']}  "
        f"unanswered {run['unanswered']}  gen {run['generator_cpu']['cores']} cores"
    )


def write_results(runs: list[dict[str, Any]], out: Path, title: str = "") -> list[Path]:
    """``runs.json`` and, with matplotlib, ``latency_vs_throughput.png`` and ``latency_cdf.png``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    written = [out / "runs.json"]
    with contextlib.suppress(ImportError):  # matplotlib is the optional 'bench' extra
        written += plot(runs, out, title)
    return written


def plot(runs: list[dict[str, Any]], out: Path, title: str = "") -> list[Path]:
    import matplotlib  # type: ignore[import-not-found]  # the optional 'bench' extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    series: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        series.setdefault(f"{run['label']} ({run['mode']} loop)".strip(), []).append(run)
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=90)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4
    for (name, group), color in zip(series.items(), colors, strict=False):
        group = [r for r in group if r["latency_ms"]["p50"] is not None]
        group.sort(key=lambda r: r["offered_rps"] if r["mode"] == "open" else r["concurrency"])
        xs = [r["achieved_rps"] for r in group]
        ax.plot(xs, [r["latency_ms"]["p50"] for r in group], "o-", color=color, label=f"{name} p50")
        ax.plot(xs, [r["latency_ms"]["p99"] for r in group], "s--", color=color, label=f"{name} p99")
        for r in group:
            tag = f"{r['offered_rps']:g}/s" if r["mode"] == "open" else f"c={r['concurrency']}"
            ax.annotate(tag, (r["achieved_rps"], r["latency_ms"]["p99"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("achieved throughput (req/s, 200s only)")
    ax.set_ylabel("latency (ms, log)")
    ax.set_title(title or "latency vs throughput")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    curve = out / "latency_vs_throughput.png"
    fig.savefig(curve)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=90)
    for run in runs:
        if not run["cdf_ms"]:
            continue
        load = f"{run['offered_rps']:g}/s" if run["mode"] == "open" else f"c={run['concurrency']}"
        ax.plot(run["cdf_ms"], np.linspace(0, 1, len(run["cdf_ms"])), label=f"{run['label']} {load}".strip())
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("fraction of requests")
    ax.set_title((title + ": " if title else "") + "latency CDF (warm-up excluded)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    cdf = out / "latency_cdf.png"
    fig.savefig(cdf)
    plt.close(fig)
    return [curve, cdf]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="base URL, 127.0.0.1 only (the payload gives the path)")
    parser.add_argument("--rates", type=_floats, default=[], help="open loop: offered req/s, comma-separated")
    parser.add_argument("--concurrency", type=_floats, default=[], help="closed loop: connections, comma-separated")
    parser.add_argument("--payload", choices=sorted(PAYLOADS), default="digits-json")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--drain", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=2_000_000)
    parser.add_argument("--connections", type=int, default=None, help="open loop: fixed pool size")
    parser.add_argument("--pin-cpu", type=int, default=None, help="run the generator on this CPU only")
    parser.add_argument("--server-pid", type=int, default=None, help="report this process tree's CPU and RSS")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=None, help="directory for runs.json and the PNGs")
    args = parser.parse_args()
    if not args.rates and not args.concurrency:
        parser.error("give --rates and/or --concurrency")
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    runs = sweep(
        args.url, PAYLOADS[args.payload](), rates=args.rates, concurrencies=[int(c) for c in args.concurrency],
        server_pid=args.server_pid, label=args.label, duration=args.duration, warmup=args.warmup,
        drain=args.drain, max_requests=args.max_requests, connections=args.connections,
    )  # fmt: skip
    for run in runs:
        print(brief(run), flush=True)
    if args.out:
        for path in write_results(runs, args.out, args.label):
            print(path)


if __name__ == "__main__":
    main()
