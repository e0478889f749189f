"""Backend resolution: a named backend, or ``auto``, which times the candidates at startup.

``auto`` (the default) tries ``RuntimeOptions.auto_backends``, or when that is () the quick ones
(``AUTO_CANDIDATES``: eager, static, onnxruntime): compile, one runtime, warm-up, and its
answer on the example inputs checked against eager PyTorch.
A candidate that raises anything (ModelLoadError for a model it cannot take, ConfigError for a
machine it cannot run on) is skipped, with the reason kept in the table. The survivors are
timed in interleaved rounds, so that machine noise hits them alike, and the lowest score wins;
its compiled artifact is what the pool is built from (nothing is compiled twice). Warnings a
candidate raised while compiling (e.g. torchscript's FutureWarning) are re-raised only if it
wins, DeprecationWarnings not at all (they are for developers and hidden by default).

Score, in microseconds (lower is better): for a model without a batch dimension, the median
time of a call on the example inputs. A batched model is also timed at batch 1 and at a batch
of N: with batching on, N = ``max_batch_size``, the batch it forms under load, and the score
is the median time per sample at N, because the batch a backend serves decides its throughput
(a model can be faster on one backend at batch 1 and on another at its serving batch, as
MiniLM is: a mean of the two would choose the wrong one for batched serving). Without
batching, N = 8 stands for the batched requests clients may send, and the score is the
geometric mean of the batch-1 time and the time per sample at N: latency and throughput count
alike in ratios (twice as fast at one and twice as slow at the other ties), whatever their
absolute sizes.

Only candidates that can win are timed to the end (inferpool.engine.backends.auto_prune).
Eager is compiled first (nothing to compile; its time is the yardstick); a backend that runs
eager's kernels and beats it only by their dispatch (static) is not compiled when eager's
batch-1 call is long enough for the kernels to be the call and another candidate already runs
it far faster. The likeliest winner is probed first; a candidate whose calls are long (a round
is one call) is stopped at the first call whose fastest-calls score is worse than the leader's
median score: more calls could only raise it. Short calls are timed to the end (their fastest
call says little), and a candidate left alone is not timed in rounds. These spare a
compute-bound model (ResNet-50) most of its cold start and leave the choice on the small models
(digits, the MLP) as it was.

Time spent: every compiled candidate's compile (the bulk; AOTInductor's first compile is so long that
it is timed only when listed) plus about ROUNDS x ROUND_SECONDS per batch size per candidate of
timing. Figures: docs/BENCHMARKS.md, "Figures moved from the code".
"""

from __future__ import annotations

import logging
import math
import re
import statistics
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from inferpool.engine.backends import AUTO, BACKENDS, backend_names
from inferpool.engine.backends.auto_prune import cannot_win, hopeless, score
from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.choice_cache import choice_path, read_choice, write_choice
from inferpool.engine.backends.parity import eager_outputs, first_mismatch
from inferpool.engine.backends.precision_auto import choose_precision
from inferpool.engine.errors import ConfigError, EngineError, ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import AUTO_CANDIDATES, RuntimeOptions
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)

ROUNDS = 5
ROUND_SECONDS = 0.01
"""Time per candidate, batch size and round: enough calls of the built-in models for a stable
median while all the rounds (ROUNDS x 2 batch sizes x the candidates) stay a small part of a
startup; the quick candidates' scores differ on the built-in models far beyond a round's noise."""
MAX_CALLS = 200
PROBES = 3
"""Calls per batch size before the rounds, to size them (and to stop a long-call candidate early)."""
UNBATCHED_N = 8
"""The batch timed beside batch 1 when batching is off: requests that carry several samples."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
SCORE = (
    "us; batched models: batch-N us/sample with batching (N = max_batch_size), else the geometric mean of "
    "batch-1 us/call and batch-N us/sample (N = 8); unbatched models: us/call"
)


@dataclass(frozen=True)
class Trial:
    """One candidate's row in the table (None where it was not measured)."""

    backend: str
    compile_seconds: float
    batch1_us: float | None = None
    batch_size: int | None = None
    per_sample_us: float | None = None
    score_us: float | None = None
    error: str | None = None
    stopped_early: bool = False
    """Timing stopped once it could no longer win (the module docstring); its figures are from
    the calls it had."""


@dataclass(frozen=True)
class BackendChoice:
    """The backend a model is served with, its shared compiled artifact and, for ``auto``,
    the table it was chosen from."""

    name: str
    backend: type[Runtime]
    compiled: Any
    configured: str
    trials: tuple[Trial, ...] = ()
    cached: bool = False
    """``auto`` served what an earlier start chose (inferpool.engine.backends.choice_cache)."""

    def report(self) -> dict[str, Any]:
        """JSON-ready: what was configured, what serves, and every candidate's row."""
        table = [asdict(t) for t in self.trials]
        return {"configured": self.configured, "chosen": self.name, "score": SCORE, "candidates": table,
                "cached": self.cached}  # fmt: skip


def resolve_backend(module: InferenceModule, options: RuntimeOptions) -> BackendChoice:
    if options.backend == AUTO:
        choice = _with_precision(
            module, options, _cached_or_chosen(module, options, options.auto_backends or AUTO_CANDIDATES)
        )
        # A backend whose artifact holds its own copy of the weights lets the torch module's go,
        # now that nothing else will run it (onnxruntime; see inferpool.engine.backends.weights).
        release = getattr(choice.backend, "release_weights", None)
        if release is not None:
            release(module)
        return choice
    if options.backend not in BACKENDS:
        raise ConfigError(f"backend {options.backend!r} is unknown; choose one of {backend_names()}")
    backend = BACKENDS[options.backend]
    named = BackendChoice(options.backend, backend, backend.compile(module, options), options.backend)
    return _with_precision(module, options, named)


def _with_precision(module: InferenceModule, options: RuntimeOptions, fp32: BackendChoice) -> BackendChoice:
    """``precision = "auto"``: the fp32 choice, or the bf16 candidate that beat it
    (inferpool.engine.backends.precision_auto), with its row added to the table."""
    if options.precision != "auto":
        return fp32
    batch1_us = next((t.batch1_us for t in fp32.trials if t.backend == fp32.name), None)

    def fp32_runtime() -> Runtime:
        runtime = fp32.backend(module, options, fp32.compiled)
        runtime.warmup()
        return runtime

    reduced = choose_precision(module, options, fp32.name, fp32_runtime, batch1_us)
    if reduced is None:
        return fp32
    per_sample = round(reduced.call_us / reduced.batch, 2) if reduced.batch > 1 else None
    trial = Trial(f"{reduced.name} bf16", reduced.compile_seconds, reduced.call_us if reduced.batch == 1 else None,
                  reduced.batch if reduced.batch > 1 else None, per_sample)  # fmt: skip
    trials = (*fp32.trials, trial) if fp32.trials else ()
    return replace(fp32, name=reduced.name, backend=reduced.backend, compiled=reduced.compiled, trials=trials)


def _cached_or_chosen(module: InferenceModule, options: RuntimeOptions, names: tuple[str, ...]) -> BackendChoice:
    """The winner an earlier start chose, compiled and checked again; else a new choice, kept."""
    path = choice_path(module, options, names)
    saved = read_choice(path, names) if path is not None else None
    if saved is not None and path is not None:
        chosen, table = saved
        inputs = _timing_inputs(module, options)
        try:
            winner = _try(module, options, BACKENDS[chosen], _eager(module, inputs[1]), inputs[1])
        except Exception as exc:
            log.warning("auto: the cached choice %r for %r no longer serves (%s); timing the candidates", chosen,
                        module.name, exc, exc_info=True)  # fmt: skip
        else:
            log.info("auto: model %r is served by %r, as chosen at an earlier start (%s)", module.name, chosen, path)
            trials = tuple(Trial(**row) for row in table)  # type: ignore[arg-type]
            return BackendChoice(chosen, winner.backend, winner.compiled, AUTO, trials, cached=True)
    choice = choose(module, options, {n: BACKENDS[n] for n in names})
    if path is not None:
        write_choice(path, choice.name, [asdict(t) for t in choice.trials])
    return choice


@dataclass
class _Candidate:
    backend: type[Runtime]
    compiled: Any
    runtime: Runtime
    compile_seconds: float
    warnings: list[warnings.WarningMessage]
    batch1_calls: list[float]
    """A few calls at batch 1 after the parity check: the prior for what to compile next, and
    the first of its probe calls."""

    @property
    def batch1_seconds(self) -> float:
        return statistics.median(self.batch1_calls)


def choose(module: InferenceModule, options: RuntimeOptions, backends: Mapping[str, type[Runtime]]) -> BackendChoice:
    """Try, time and pick among ``backends``; see the module docstring."""
    inputs = _timing_inputs(module, options)
    reference = _eager(module, inputs[1])
    candidates: dict[str, _Candidate] = {}
    skipped: dict[str, Trial] = {}
    for name, backend in sorted(backends.items(), key=lambda item: (item[0] != "eager", item[1].eager_kernels)):
        reason = cannot_win(backend, {n: c.batch1_seconds for n, c in candidates.items()})
        if reason is not None:
            skipped[name] = Trial(name, 0.0, error=reason)
            log.info("auto: %s %s", name, reason)
            continue
        started = time.perf_counter()
        try:
            candidates[name] = _try(module, options, backend, reference, inputs[1])
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            skipped[name] = Trial(name, round(time.perf_counter() - started, 3), error=_short(reason))
            # Backends refuse models on purpose with engine errors; anything else is a bug to see.
            log.log(logging.INFO if isinstance(exc, EngineError) else logging.WARNING, "auto: skipping %s: %s",
                    name, reason, exc_info=not isinstance(exc, EngineError))  # fmt: skip
    if not candidates:
        reasons = "; ".join(f"{n}: {t.error}" for n, t in skipped.items())
        raise ModelLoadError(f"no backend can serve model {module.name!r} ({reasons}); fix one of them")
    batching = options.max_batch_size > 1
    medians, stopped = _time(candidates, inputs, batching)
    trials = {name: _trial(name, c, medians[name], batching, name in stopped) for name, c in candidates.items()}
    trials |= skipped
    table = tuple(trials[name] for name in backends)
    chosen = min(candidates, key=lambda name: trials[name].score_us or math.inf)
    for caught in candidates[chosen].warnings:
        # DeprecationWarnings are for developers of the code that raised them (hidden by
        # default); FutureWarning & co are for whoever serves the model, so they are passed on.
        if not issubclass(caught.category, (DeprecationWarning, PendingDeprecationWarning)):
            warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    log.info("auto: model %r is served by %r\n%s", module.name, chosen, format_table(table))
    winner = candidates[chosen]
    return BackendChoice(chosen, winner.backend, winner.compiled, AUTO, table)


def _try(
    module: InferenceModule,
    options: RuntimeOptions,
    backend: type[Runtime],
    reference: dict[str, Array],
    inputs: Mapping[str, Array],
) -> _Candidate:
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # recorded, to be re-raised if this candidate wins
        compiled = backend.compile(module, options)
    seconds = time.perf_counter() - started
    runtime = backend(module, options, compiled)
    runtime.warmup()
    got = runtime.run(inputs)
    names = list(reference)
    wrong = first_mismatch(names, [got[n] for n in names], list(reference.values()), backend.tolerance)
    if wrong is not None:
        raise ModelLoadError(f"its output {wrong!r} disagrees with eager PyTorch on the example inputs")
    return _Candidate(backend, compiled, runtime, seconds, list(caught), _calls(runtime, inputs, PROBES))


def _short(reason: str, limit: int = 300) -> str:
    """The reason's first line, capped: the table is for reading (exporters' messages run to
    pages); the log has it whole."""
    line = _ANSI.sub("", reason).strip().splitlines()[0]  # exporters colour their messages
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _timing_inputs(module: InferenceModule, options: RuntimeOptions) -> dict[int, dict[str, Array]]:
    """Batch size -> inputs: the example inputs at batch 1 and at N (the module docstring), or
    as they are if unbatched."""
    if not all(spec.batched for spec in module.schema.inputs):
        return {1: dict(module.example_inputs)}
    served = options.max_batch_size if options.max_batch_size > 1 else UNBATCHED_N
    return {size: module.examples(size) for size in (1, served)}


def _eager(module: InferenceModule, inputs: Mapping[str, Array]) -> dict[str, Array]:
    names = [spec.name for spec in module.schema.outputs]
    return dict(
        zip(names, eager_outputs(module, {spec.name: inputs[spec.name] for spec in module.schema.inputs}), strict=True)
    )


def _time(
    candidates: Mapping[str, _Candidate], inputs: Mapping[int, Mapping[str, Array]], batching: bool
) -> tuple[dict[str, dict[int, float]], set[str]]:
    """Name -> batch size -> median seconds per call, over ROUNDS interleaved rounds; and the
    names stopped early. Probe calls come first, the likeliest winner's first, one call at a
    time so that a long-call candidate stops at the first that rules it out. The medians of a
    candidate stopped early, or of one left alone, are of all the calls it had."""
    probes: dict[tuple[str, int], list[float]] = {}
    stopped = set[str]()
    for name in sorted(candidates, key=lambda n: candidates[n].batch1_seconds):
        probes[name, 1] = list(candidates[name].batch1_calls)
        for size, arrays in inputs.items():
            while len(probes.setdefault((name, size), [])) < PROBES and name not in stopped:
                probes[name, size] += _calls(candidates[name].runtime, arrays, 1)
                if all((name, s) in probes for s in inputs):
                    stopped |= hopeless({k: v for k, v in probes.items() if k[0] not in stopped}, batching)
    calls = {key: _per_round(statistics.median(probe)) for key, probe in probes.items()}
    times: dict[tuple[str, int], list[float]] = {key: [] for key in calls}
    live = set(candidates) - stopped
    for _ in range(ROUNDS if len(live) > 1 else 0):
        stopped |= hopeless({k: probes[k] + times[k] for k in calls if k[0] in live}, batching)
        live -= stopped
        for (name, size), count in calls.items():
            if name in live:
                times[name, size] += _calls(candidates[name].runtime, inputs[size], count)
    medians: dict[str, dict[int, float]] = {name: {} for name in candidates}
    for (name, size), seconds in times.items():
        medians[name][size] = statistics.median(
            seconds if seconds and name not in stopped else probes[name, size] + seconds
        )
    return medians, stopped


def _calls(runtime: Runtime, inputs: Mapping[str, Array], count: int) -> list[float]:
    clock, times = time.perf_counter, []
    for _ in range(count):
        started = clock()
        runtime.run(inputs)
        times.append(clock() - started)
    return times


def _per_round(probe: float) -> int:
    return max(1, min(MAX_CALLS, int(ROUND_SECONDS / max(probe, 1e-7))))


def _trial(name: str, candidate: _Candidate, medians: Mapping[int, float], batching: bool, stopped: bool) -> Trial:
    batch1, scored, size = medians[1] * 1e6, score(medians, batching) * 1e6, max(medians)
    compiled = round(candidate.compile_seconds, 3)
    if size == 1:
        return Trial(name, compiled, round(batch1, 1), score_us=round(scored, 1), stopped_early=stopped)
    per_sample = medians[size] * 1e6 / size
    return Trial(name, compiled, round(batch1, 1), size, round(per_sample, 2), round(scored, 1), stopped_early=stopped)


def format_table(trials: tuple[Trial, ...]) -> str:
    def cell(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    size = next((t.batch_size for t in trials if t.batch_size), None)
    lines = [f"  {'backend':14} {'compile s':>9} {'batch-1 us':>10} {f'batch-{size} us/sample':>20} {'score us':>9}"]
    for t in trials:
        if t.error is not None:
            lines.append(f"  {t.backend:14} {t.compile_seconds:9.2f}  skipped: {t.error}")
            continue
        lines.append(
            f"  {t.backend:14} {t.compile_seconds:9.2f} {cell(t.batch1_us, 1):>10} "
            f"{cell(t.per_sample_us, 2):>20} {cell(t.score_us, 1):>9}{'  stopped early' if t.stopped_early else ''}"
        )
    return "\n".join(lines)
