"""Closed-loop runs with Debian's ``wrk`` instead of the Python generator.

wrk is C, one thread on epoll: it spends a fraction of the Python client's CPU per request, so
on a 2-core machine more of the CPU goes to the server being measured. A Lua ``done`` hook
prints 200 latency percentiles (wrk's own histogram, µs) and the error counts as JSON, and the
result has the same shape as ``loadtest.openloop.run_one``'s (so tables and plots take either).
The warm-up is a separate wrk run before the measured one; the generator's CPU is wrk's own
(``RUSAGE_CHILDREN`` around the measured run).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.harness.payloads import Payload
from loadtest.openloop.stats import CDF_POINTS
from loadtest.procs import tree_cpu_seconds, tree_rss_bytes

WRK = shutil.which("wrk") or "wrk"
SCRIPT = """local f = io.open("{body}", "rb")
wrk.method = "{method}"
wrk.body = f:read("*a")
f:close()
{headers}
{variants}
done = function(summary, latency, requests)
  local p = {{}}
  for i = 0, {last} do p[#p + 1] = string.format("%d", latency:percentile(i * 100 / {last})) end
  local e = summary.errors
  io.write(string.format(
    'WRK-JSON {{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, "status": %d, '
    .. '"timeout": %d, "max_us": %d, "mean_us": %f, "percentiles_us": [%s]}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency.max, latency.mean, table.concat(p, ",")))
end
"""


def script(payload: Payload, directory: Path) -> Path:
    """A wrk Lua script sending ``payload`` (body from a file: it may be binary)."""
    directory.mkdir(parents=True, exist_ok=True)
    body = directory / f"body-{abs(hash((payload.body, payload.variants)))}.bin"
    body.write_bytes(payload.body)
    headers = "\n".join(f'wrk.headers["{name}"] = "{value}"' for name, value in payload.headers)
    path = body.with_suffix(".lua")
    variants = variants_script(payload, body) if payload.variants else ""
    path.write_text(
        SCRIPT.format(body=body, method=payload.method, headers=headers, variants=variants, last=CDF_POINTS - 1)
    )
    return path


def variants_script(payload: Payload, body: Path) -> str:
    """Lua that sends ``payload.body`` and its variants in turn, one per request, each connection
    starting where the last left off."""
    files = []
    for i, variant in enumerate(payload.variants):
        files.append(body.with_name(f"{body.stem}-{i}.bin"))
        files[-1].write_bytes(variant)
    reads = "\n".join(f'f = io.open("{file}", "rb"); bodies[#bodies + 1] = f:read("*a"); f:close()' for file in files)
    return f"""local bodies = {{wrk.body}}
local f
{reads}
local sent = 0
request = function()
  sent = sent % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[sent])
end"""


def _wrk(url: str, lua: Path, concurrency: int, seconds: float) -> dict[str, Any]:
    argv = [WRK, "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(lua), url]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 60)
    line = next((x for x in done.stdout.splitlines() if x.startswith("WRK-JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{done.stdout}\n{done.stderr}")
    found: dict[str, Any] = json.loads(line[len("WRK-JSON ") :])
    return found


def run_one(
    url: str, payload: Payload, concurrency: int, *, duration: float, warmup: float, label: str, server_pid: int,
    scratch: Path,
) -> dict[str, Any]:  # fmt: skip
    """One closed-loop run at ``concurrency`` connections; the report openloop.run_one gives."""
    lua = script(payload, scratch)
    target = url + payload.path
    if warmup > 0:
        _wrk(target, lua, concurrency, warmup)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = tree_cpu_seconds(server_pid)
    wall = time.perf_counter()
    result = _wrk(target, lua, concurrency, duration)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = result["duration_us"] / 1e6
    bad = {k: result[k] for k in ("connect", "read", "write", "timeout") if result[k]}
    cdf = [round(v / 1e3, 3) for v in result["percentiles_us"]]
    pct = np.asarray(cdf)

    def at(q: float) -> float:
        return round(float(np.interp(q, np.linspace(0, 100, len(pct)), pct)), 3)

    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "label": label,
        "mode": "closed",
        "generator": "wrk",
        "payload": payload.path,
        "offered_rps": None,
        "concurrency": concurrency,
        "connections": concurrency,
        "duration_s": duration,
        "warmup_s": warmup,
        "achieved_rps": round((result["requests"] - result["status"]) / seconds, 1),
        "requests": result["requests"],
        "ok": result["requests"] - result["status"],
        "rejected_503": 0,
        "other_status": {"non-2xx": result["status"]} if result["status"] else {},
        "connection_errors": sum(bad.values()),
        "error_kinds": bad,
        "unanswered": 0,
        "latency_ms": {
            "p50": at(50),
            "p90": at(90),
            "p95": at(95),
            "p99": at(99),
            "p99.9": at(99.9),
            "max": round(result["max_us"] / 1e3, 3),
            "mean": round(result["mean_us"] / 1e3, 3),
        },
        "latency_from": "send time",
        "cdf_ms": cdf,
        "generator_cpu": {
            "cores": round(cpu / wall, 3),
            "us_per_request": round(cpu / max(1, result["requests"]) * 1e6, 1),
            "affinity": sorted(os.sched_getaffinity(0)),
        },
        "server_cpu_cores": round((tree_cpu_seconds(server_pid) - server_before) / wall, 3),
        "server_rss_mb": round(tree_rss_bytes(server_pid) / 2**20, 1),
    }
