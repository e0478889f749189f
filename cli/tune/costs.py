"""What one model call costs here, per backend, intra-op threads and batch size, measured once
in this process on one runtime (no server): the figures ``inferpool tune`` prunes its search
with. Each backend is compiled and checked against eager PyTorch by the same code as ``auto``
(inferpool.engine.backends.autoselect.choose), so a backend that cannot serve the model is dropped with
its reason. Also measured: the share of a batch-1 call that holds the GIL, which says whether
worker threads and several runtimes per process can overlap calls at all.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions, load_model
from inferpool.engine.backends.autoselect import choose
from inferpool.engine.backends.base import Runtime
from inferpool.engine.models.handlers import Handler, load_handler
from inferpool.engine.plan.gil_probe import measure_gil_hold
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)

CELL_SECONDS = 0.04  # timing per (backend, threads, batch size); at least MIN_CALLS calls
MIN_CALLS = 3
GIL_SECONDS = 0.1


@dataclass
class Costs:
    """Median seconds per call by (backend, intra-op threads, batch size); GIL share of a
    batch-1 call by backend; backends that failed, with the reason."""

    cpus: int
    batched: bool
    calls: dict[tuple[str, int, int], float] = field(default_factory=dict)
    gil_share: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def backends(self) -> list[str]:
        return sorted({backend for backend, _, _ in self.calls})

    def threads(self, backend: str) -> list[int]:
        return sorted({t for b, t, _ in self.calls if b == backend})

    def sizes(self, backend: str, threads: int = 1) -> list[int]:
        return sorted(s for b, t, s in self.calls if b == backend and t == threads)

    def call(self, backend: str, threads: int, batch: int) -> float:
        """Seconds per call at ``batch``: the largest measured size at most ``batch``, scaled
        up linearly (no more saving per sample than measured), and no more than any larger size
        measured. A call on fewer samples cannot need more time than one on more (it could be
        padded to that size), so a smaller size that measured slower was disturbed: one such cell
        of the digits model once cut batching out of the search (docs/BENCHMARKS.md, "inferpool tune (issue 20)")."""
        sizes = self.sizes(backend, threads) or self.sizes(backend)
        threads = threads if self.sizes(backend, threads) else 1
        size = max((s for s in sizes if s <= batch), default=sizes[0])
        scaled = self.calls[backend, threads, size] * batch / size
        return min([scaled, *(self.calls[backend, threads, s] for s in sizes if s >= batch)])

    def disturbed(self) -> list[str]:
        """The cells ``call`` bounds by a larger size's time, one line each (for the report)."""
        lines = []
        for (backend, threads, size), seconds in sorted(self.calls.items()):
            bound = self.call(backend, threads, size)
            if bound < seconds:
                lines.append(f"{backend} x{threads} b{size}: timed {seconds * 1e6:.0f} us, more than a larger "
                             f"batch: taken as {bound * 1e6:.0f} us")  # fmt: skip
        return lines

    def per_sample(self, backend: str, threads: int, batch: int) -> float:
        return self.call(backend, threads, batch) / batch


def batch_sizes(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit`` (and ``limit`` itself)."""
    sizes, size = [], 1
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, max(1, limit)]


class CostMeter:
    """Loads the model once and keeps one warm runtime per (backend, intra-op threads) it
    prepared, so that batch sizes can be timed round-robin across backends."""

    def __init__(self, source: str, options: RuntimeOptions, handler: str | None, request: object, cpus: int) -> None:
        model = load_model(source)
        self.module = InferenceModule.from_spec(model)
        self.options = replace(options, warmup_iters=max(2, options.warmup_iters), num_runtimes=1)
        self.batched = all(spec.batched for spec in self.module.schema.inputs + self.module.schema.outputs)
        self.one = self._one_request(load_handler(handler) if handler else model.handler, request)
        self.costs = Costs(cpus, self.batched)
        self.runtimes: dict[tuple[str, int], Runtime] = {}

    def _one_request(self, handler: Handler | None, request: object) -> dict[str, Array]:
        """The inputs of one request as the model gets them: through the handler when there is
        one (the config's, or a folder's own: text becomes token ids of its real length), else
        the model's example inputs."""
        if handler is None or request is None:
            return dict(self.module.example_inputs)
        arrays, _ = handler.preprocess(request)
        return {name: np.ascontiguousarray(array) for name, array in arrays.items()}

    def inputs(self, batch: int) -> dict[str, Array]:
        if not self.batched:
            return self.one
        return {n: np.ascontiguousarray(np.resize(a, (batch, *a.shape[1:]))) for n, a in self.one.items()}

    def prepare(self, backend: str, threads: int) -> bool:
        """Compile, check and warm ``backend`` at ``threads``, and time it at batch 1 (and how
        much of that call holds the GIL, at 1 thread); False if it cannot serve the model (the
        reason goes to ``costs.skipped``)."""
        torch.set_num_threads(threads)
        options = replace(self.options, backend=backend, intra_op_threads=threads)
        try:
            choice = choose(self.module, options, {backend: BACKENDS[backend]})
        except Exception as exc:  # noqa: BLE001 - whatever a backend raises on this model drops it, as in ``auto``
            self.costs.skipped[backend] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            return False
        runtime = self.runtimes[backend, threads] = choice.backend(self.module, options, choice.compiled)
        runtime.warmup()
        self.time(backend, threads, 1)
        if threads == 1 and self.costs.cpus >= 2:
            one = self.inputs(1)
            self.costs.gil_share[backend] = round(measure_gil_hold(lambda: runtime.run(one), GIL_SECONDS).gil_share, 3)
        return True

    def time(self, backend: str, threads: int, batch: int) -> None:
        torch.set_num_threads(threads)
        self.costs.calls[backend, threads, batch] = _median_call(self.runtimes[backend, threads], self.inputs(batch))


def measure_costs(
    meter: CostMeter, backends: list[str], sizes: list[int], threads: list[int], deadline: float,
    keep: Callable[[Costs], list[str]],
) -> Costs:  # fmt: skip
    """Every backend at 1 thread, then each larger batch size across all of them, then more
    ``threads`` for the backends ``keep`` keeps: the time box (``deadline``) cuts every backend
    alike, and the first backend is always timed."""
    costs = meter.costs
    sizes = sizes if meter.batched else [1]
    for count in threads:
        names = backends if count == 1 else keep(costs)
        for number, backend in enumerate(names):
            if (number or count > 1) and time.monotonic() > deadline:
                costs.notes.append(f"{', '.join(names[number:])} x{count} threads: not timed (time box)")
                break
            meter.prepare(backend, count)
        for size in sizes[1:]:
            ready = [b for b in names if (b, count) in meter.runtimes]
            if time.monotonic() > deadline:
                if ready:
                    costs.notes.append(f"{', '.join(ready)} x{count} threads: timed up to batch {size // 2} (time box)")
                break
            for backend in ready:
                meter.time(backend, count, size)
    meter.runtimes.clear()
    costs.notes += costs.disturbed()
    return costs


def _median_call(runtime: Runtime, inputs: Mapping[str, Array]) -> float:
    runtime.run(inputs)  # a new shape: the first call plans or allocates
    times: list[float] = []
    end = time.perf_counter() + CELL_SECONDS
    while len(times) < MIN_CALLS or time.perf_counter() < end:
        started = time.perf_counter()
        runtime.run(inputs)
        times.append(time.perf_counter() - started)
    return statistics.median(times)
