"""Open-loop (constant arrival rate) and closed-loop load generator over raw keep-alive HTTP/1.1.

    python -m loadtest.openloop URL --rates 200,400,800 [--duration 10 --warmup 2]
    python -m loadtest.openloop URL --concurrency 1,8,64 [--duration 10 --warmup 2]
    options: --payload digits-json|digits-v2-binary|minilm-json|...|empty  --out DIR  --pin-cpu N  --server-pid PID

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

The client is ``inferpool.harness.client.Connection``, asyncio streams (uvloop when installed) writing one
pre-built request (``inferpool.harness.payloads``) and parsing just the status line, ``Content-Length``
(or chunked) and ``Connection: close``; against ``loadtest.tiny_server`` it costs 30-60 us of
CPU per request and reaches ~20k req/s on one core. It shares the machine with the server: its
own CPU time is reported (``generator_cpu``: ``getrusage`` over the run, in cores), and ``--pin-cpu``
pins it to one core (``os.sched_setaffinity``) so the server can be given the other.

Results: one JSON report (every run: offered/sent/achieved rate, p50/p90/p95/p99/p99.9/max,
status counts, errors, a 200-point latency CDF) and, when matplotlib is installed, PNGs of
latency vs throughput and of the latency CDFs.

By concern: ``schedule`` (the open and closed loops), ``stats`` (a run's report), ``sweep`` (runs
with CPU use), ``report`` (the line, the JSON and the plots), ``cli``.
"""

from __future__ import annotations

from loadtest.openloop.report import brief, write_results
from loadtest.openloop.schedule import RunConfig
from loadtest.openloop.sweep import run_one, sweep

__all__ = ["RunConfig", "brief", "run_one", "sweep", "write_results"]
