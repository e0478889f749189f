"""8 threads x 200 calls through the pool: same numbers as one thread, no runtime shared."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from inferpool.engine import RuntimePool
from inferpool.engine.backends.eager import EagerRuntime

THREADS = 8
CALLS = 200


class ExclusiveCheckingRuntime(EagerRuntime):
    """Records any moment at which two threads are inside one runtime."""

    violations = 0

    def run(self, inputs):
        if not self._entered.acquire(blocking=False):
            ExclusiveCheckingRuntime.violations += 1
            return super().run(inputs)
        try:
            return super().run(inputs)
        finally:
            self._entered.release()

    _entered: threading.Lock


def test_pool_under_contention_matches_single_thread_eager(digits_module, options, reference):
    runtimes = []
    for _ in range(3):  # fewer runtimes than threads, so borrowers really wait and contend
        runtime = ExclusiveCheckingRuntime(digits_module, options)
        runtime._entered = threading.Lock()
        runtimes.append(runtime)
    pool = RuntimePool(runtimes, timeout=30)
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, 17, size=(1 + i % 3, 1, 8, 8)).astype(np.float32) for i in range(THREADS * CALLS)]
    expected = [reference(batch) for batch in batches]

    def call(index: int) -> dict[str, np.ndarray]:
        with pool.borrow() as runtime:
            return runtime.run({"image": batches[index]})

    with ThreadPoolExecutor(THREADS) as threads:
        results = list(threads.map(call, range(THREADS * CALLS)))

    assert ExclusiveCheckingRuntime.violations == 0
    assert pool.idle == 3
    assert sum(r.calls for r in runtimes) == THREADS * CALLS
    assert all(r.calls > 0 for r in runtimes)
    for got, (probabilities, label) in zip(results, expected, strict=True):
        np.testing.assert_array_equal(got["probabilities"], probabilities)
        np.testing.assert_array_equal(got["label"], label)
