"""The response cache (docs/traffic.md) against no cache, on a real server, rounds interleaved.

    python -m loadtest.bench response_cache --workload minilm-zipf   # repeats: what a hit saves
    python -m loadtest.bench response_cache --workload digits-miss   # no repeats: what a miss costs

``minilm-zipf``: ``config/minilm.toml``'s server, 32 keep-alive connections in a closed loop,
each request one of 1,000 sentences drawn by a Zipf law (s = 1.1, a search engine's query log's
shape): req/s, p50 and p99 with ``response_cache_mb`` at ``--cache-mb`` and at 0, and the hit
ratio the server counted. With several serving processes each warms its own cache: ``--workers 1``
against the default (one per CPU) shows what one cache per process loses to keep-alive
connections spread over the processes, the figure a cache shared in memory would have to beat.

``digits-miss``: the built-in digits model, every request a new image (no hit is possible): the
cost of a miss (writing the request out, one look-up, keeping the answer) against the cache off,
which must be within the rounds' own spread.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import httpx2
import numpy as np

from inferpool.harness.load import Summary, Workload, blocking, drive
from inferpool.harness.metrics import metric_total
from inferpool.harness.payloads import SENTENCE, Payload, json_request
from inferpool.harness.server import inferpool_serve, launch
from loadtest.bench import case_parser
from loadtest.workloads import MINILM

TEXTS = 1000
ZIPF_S = 1.1


def zipf_sentences(requests: int, seed: int = 0) -> list[Payload]:
    """``requests`` bodies over ``TEXTS`` sentences, sentence k drawn with weight 1 / k**s."""
    weights = 1.0 / np.arange(1, TEXTS + 1) ** ZIPF_S
    drawn = np.random.default_rng(seed).choice(TEXTS, size=requests, p=weights / weights.sum())
    return [json_request(f"{SENTENCE} Query {int(k)}.") for k in drawn]


def new_digits(requests: int, seed: int = 0) -> list[Payload]:
    images = np.random.default_rng(seed).integers(0, 17, size=(requests, 1, 8, 8))
    return [json_request(image) for image in images]


WORKLOADS: dict[str, tuple[tuple[str, ...], Callable[[int], list[Payload]], str, int]] = {
    "minilm-zipf": (("--config", MINILM), zipf_sentences, "minilm", 50_000),
    # More images than a round sends at the digits model's rate: none repeats (the hit ratio says so).
    "digits-miss": ((), new_digits, "digits", 300_000),
}


def response_cache_parser() -> argparse.ArgumentParser:
    parser = case_parser("response_cache", __doc__)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="minilm-zipf")
    parser.add_argument("--cache-mb", type=float, default=64.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="serving processes (0: the server's default)")
    parser.add_argument(
        "--requests", type=int, default=0, help="bodies drawn, sent in turn (0: the workload's own count)"
    )
    return parser


def _round(args: argparse.Namespace, cache_mb: float, payloads: list[Payload]) -> tuple[Summary, float]:
    serve, _, model, _ = WORKLOADS[args.workload]
    command = inferpool_serve(*serve, "--workers", str(args.workers), "--response-cache-mb", f"{cache_mb:g}")
    with launch(command, ready_timeout=600) as server:
        window = blocking(drive)(
            server.port, Workload(payloads, concurrency=args.connections), args.warmup, args.seconds
        )
        text = httpx2.get(server.url + "/metrics", timeout=10).text
    hits = metric_total(text, "inferpool_response_cache_total", model=model, outcome="hit")
    asked = metric_total(text, "inferpool_response_cache_total", model=model)
    return window.summary(), hits / asked if asked else 0.0


def response_cache(argv: list[str]) -> None:
    args = response_cache_parser().parse_args(argv)
    _, draw, _, count = WORKLOADS[args.workload]
    payloads = draw(args.requests or count)
    results: dict[str, list[tuple[Summary, float]]] = {"cache off": [], f"cache {args.cache_mb:g} MB": []}
    sizes = {"cache off": 0.0, f"cache {args.cache_mb:g} MB": args.cache_mb}
    for round_ in range(args.rounds):
        # The order flips every round: a server started right after another stopped meets a
        # machine the first did not (the last one's exit, the caches it left), a bias of its own.
        for label, megabytes in list(sizes.items())[:: 1 if round_ % 2 == 0 else -1]:
            results[label].append(_round(args, megabytes, payloads))
    print(
        f"{args.workload}: {args.connections} connections, {args.rounds} rounds of {args.seconds:g} s (median, spread)"
    )
    print(f"{'':<16}{'req/s':>18}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}{'hit ratio':>11}")
    for label, rounds in results.items():
        rates = [s.throughput for s, _ in rounds]
        p50 = statistics.median(s.p50_ms or 0.0 for s, _ in rounds)
        p99 = statistics.median(s.p99_ms or 0.0 for s, _ in rounds)
        errors = sum(s.errors for s, _ in rounds)
        hits = statistics.median(h for _, h in rounds)
        spread = f"{statistics.median(rates):,.0f} ±{(max(rates) - min(rates)) / 2:,.0f}"
        print(f"{label:<16}{spread:>18}{p50:>10.2f}{p99:>10.2f}{errors:>8}{hits:>11.1%}")
