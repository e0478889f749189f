"""Borrow+return cost of RuntimePool, beside the primitives it could have been built on.

    python -m loadtest.bench pool [--iterations N]

Each figure is nanoseconds per borrow+return, best of several repeats, all in one run so
that machine noise hits every row alike. "2 threads" rows run two threads at once on a pool
of 2 runtimes (each usually finds one free) and of 1 runtime (every borrow contends).
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from inferpool.engine import RuntimePool
from loadtest.bench import case_parser

Loop = Callable[[int], None]


def pool_loop(pool: RuntimePool[object]) -> Loop:
    def run(n: int) -> None:
        borrow = pool.borrow
        for _ in range(n):
            with borrow():
                pass

    return run


def deque_loop(items: deque[object]) -> Loop:
    def run(n: int) -> None:
        pop, append = items.pop, items.append
        for _ in range(n):
            append(pop())

    return run


def queue_loop(q: queue.Queue[object]) -> Loop:
    def run(n: int) -> None:
        get, put = q.get, q.put
        for _ in range(n):
            put(get())

    return run


def timed(loop: Loop, n: int, threads: int, repeats: int = 5) -> float:
    """Best ns per operation over ``repeats``; with threads, total ops / wall time per thread."""
    best = float("inf")
    for _ in range(repeats):
        workers = [threading.Thread(target=loop, args=(n,)) for _ in range(threads)]
        started = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, (time.perf_counter() - started) / (n * threads) * 1e9)
    return best


def filled_queue(size: int) -> queue.Queue[object]:
    q: queue.Queue[object] = queue.Queue()
    for i in range(size):
        q.put(i)
    return q


def pool_parser() -> argparse.ArgumentParser:
    parser = case_parser("pool", __doc__)
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5, help="best of this many runs per row")
    return parser


def pool(argv: list[str] | None = None) -> dict[str, float]:
    args = pool_parser().parse_args(argv)
    n = args.iterations
    rows = [
        ("bare deque append+pop (baseline)", deque_loop(deque([1, 2])), 1),
        ("queue.Queue put+get (baseline)", queue_loop(filled_queue(2)), 1),
        ("RuntimePool.borrow() context manager", pool_loop(RuntimePool([1, 2])), 1),
        ("bare deque, 2 threads", deque_loop(deque([1, 2, 3, 4])), 2),
        ("queue.Queue, 2 threads, 1 item", queue_loop(filled_queue(1)), 2),
        ("RuntimePool, 2 threads, 2 runtimes", pool_loop(RuntimePool([1, 2])), 2),
        ("RuntimePool, 2 threads, 1 runtime", pool_loop(RuntimePool([1], timeout=60)), 2),
    ]
    print(f"{'what':40} ns/op   ({n} iterations per thread, best of {args.repeats})")
    figures = {}
    for name, loop, threads in rows:
        figures[name] = timed(loop, n, threads, args.repeats)
        print(f"{name:40} {figures[name]:7.0f}")
    return figures
