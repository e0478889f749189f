"""``precision = "auto"`` (the default): bf16 where the CPU runs it natively, it stays accurate, and it pays.

OpenVINO's CPU plugin runs a model in bfloat16 by default on CPUs with native bf16 (AMX, AVX-512
BF16), 3.6-5x its f32 on a ResNet-50 here; served in fp32 by default, InferPool left that on the
table. So after the fp32 race (inferpool.engine.backends.autoselect) has its winner, a bf16
candidate may join:

1. only where bf16 can win: the CPU runs it natively (inferpool.engine.backends.native_bf16) and
   the fp32 winner's one-sample call takes ``MIN_CALL_SECONDS`` or more. The digits CNN's 20 µs
   call never pays for OpenVINO's import and compile, so it starts and serves exactly as before;
2. ``CANDIDATES``: OpenVINO compiles the model's ONNX export in bf16. onnxruntime is not one: its
   CPU kernels have no bf16 MatMul or Conv to gain from;
3. the accuracy gate (inferpool.engine.backends.gate) judges it against the fp32 winner's
   answers on the model's held-out inputs (``accuracy_inputs``, ``ModelSpec.held_out``). Lacking
   them it judges on the example inputs and seeded variations, at stricter thresholds
   (``SYNTHETIC_MIN_COSINE``, ``SYNTHETIC_MIN_AGREEMENT``), and the log says so;
4. it must measure ``MIN_SPEEDUP`` times the fp32 winner at the served batch (``max_batch_size``
   when set; one sample for 1, or for 0, where batching is chosen afterwards), both on one
   thread, their calls alternating (inferpool.engine.plan.calm_timing).

Otherwise fp32 serves, and the log and ``/v2/models/{name}/config`` say why. The gate's figures
and the timings are cached beside the export (``SUFFIX``), keyed by what the export's key covers,
the fp32 winner, the served batch and the gate's inputs: a warm start compiles only what serves
and re-applies today's thresholds to the cached figures, without gating or timing. An explicit
``precision`` never comes here.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine.backends import BACKENDS
from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.gate import Gate, GateFigures, measure
from inferpool.engine.backends.held_out import held_out
from inferpool.engine.backends.native_bf16 import native_bf16
from inferpool.engine.backends.precision_choice import PrecisionChoice, raced_for, record
from inferpool.engine.compile_cache import artifact_path, cache_dir, content_key, write_atomically
from inferpool.engine.errors import EngineError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.calm_timing import calmest_pair, median_seconds
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)

CANDIDATES = {"bf16": "openvino"}
"""Reduced precision -> the backend that runs it natively on a CPU (``compile_reduced``)."""
MIN_CALL_SECONDS = 0.001
"""An fp32 call shorter than this is not worth OpenVINO's import and compile (~1-3 s of start-up)."""
MIN_SPEEDUP = 1.2
"""bf16 must be this much faster than fp32 to serve: a smaller gain is within a host's drift."""
SYNTHETIC_MIN_COSINE = 0.999
SYNTHETIC_MIN_AGREEMENT = 1.0
"""The gate's floors when it has only the example inputs and random variations of them: inputs
unlike the traffic say less, so they must agree more."""
REPEATS = 5
SUFFIX = ".precision.json"


@dataclass(frozen=True)
class Reduced:
    """The candidate that serves instead of the fp32 winner, for the backend table's row."""

    name: str
    backend: type[Runtime]
    compiled: Any
    compile_seconds: float
    call_us: float
    batch: int


@dataclass(frozen=True)
class _Verdict:
    figures: GateFigures
    inputs: str
    synthetic: bool
    call_ms: dict[str, float]
    batch: int


def choose_precision(
    module: InferenceModule, options: RuntimeOptions, fp32_name: str, fp32_runtime: Callable[[], Runtime],
    fp32_batch1_us: float | None,
) -> Reduced | None:  # fmt: skip
    """The bf16 candidate when it wins under ``precision = "auto"``, else None (fp32 serves); the
    verdict is recorded either way (inferpool.engine.backends.precision_choice). ``fp32_runtime``
    builds a runtime of the winner, only where bf16 is tried; ``fp32_batch1_us`` is its one-sample
    call as the race timed it (None: not timed, so timed here)."""
    if options.precision != "auto":
        return None
    native, reading = native_bf16(options.native_bf16)
    backend_name = CANDIDATES["bf16"]
    if not native:
        return _fp32(module, options, f"{reading}, so bf16 is not tried")
    if options.backend not in ("auto", backend_name):
        return _fp32(module, options, f"backend {options.backend!r} runs no bf16 (backend 'auto' or "
                     f"{backend_name!r} lets precision 'auto' try it)")  # fmt: skip
    fp32 = cache(fp32_runtime)  # built once, and only where bf16 is tried
    call_us = (
        fp32_batch1_us
        if fp32_batch1_us is not None
        else median_seconds(lambda: fp32().run(module.examples(1)), REPEATS) * 1e6
    )
    if call_us < MIN_CALL_SECONDS * 1e6:
        return _fp32(module, options, f"the fp32 call takes {call_us / 1e3:.3f} ms, under "
                     f"{MIN_CALL_SECONDS * 1e3:g} ms: bf16 cannot pay for its compile")  # fmt: skip
    try:
        path = _verdict_path(module, options, fp32_name)
    except importlib.metadata.PackageNotFoundError:  # a core dependency, but an install can still lack it
        return _fp32(module, options, f"{backend_name} is not installed (pip install {backend_name}): no bf16")
    verdict = _read(path) if path is not None else None
    if verdict is not None and not _wins(options, verdict):
        return _decide(module, options, backend_name, verdict, True, None)  # nothing to compile
    backend = BACKENDS[backend_name]
    started = time.perf_counter()
    try:
        compiled = backend.compile_reduced(module, options, "bf16")  # type: ignore[attr-defined]
    except (EngineError, ImportError, RuntimeError) as exc:
        return _fp32(module, options, f"bf16 could not be compiled ({type(exc).__name__}: {exc})")
    compile_seconds = time.perf_counter() - started
    cached = verdict is not None
    if verdict is None:
        verdict = _measure(module, options, fp32(), backend(module, options, compiled))
        if path is not None:
            _write(path, verdict)
    reduced = Reduced(backend_name, backend, compiled, round(compile_seconds, 3),
                      round(verdict.call_ms["bf16"] * 1e3, 1), verdict.batch)  # fmt: skip
    return _decide(module, options, backend_name, verdict, cached, reduced)


def _decide(
    module: InferenceModule, options: RuntimeOptions, backend_name: str, verdict: _Verdict, cached: bool,
    reduced: Reduced | None,
) -> Reduced | None:  # fmt: skip
    gate = _gate(options, verdict)
    speedup = verdict.call_ms["fp32"] / verdict.call_ms["bf16"]
    timed = f"{speedup:.2f}x fp32 at batch {verdict.batch} ({verdict.call_ms['bf16']:.3g} against " \
            f"{verdict.call_ms['fp32']:.3g} ms)"  # fmt: skip
    raced = raced_for(backend_name, options)
    if not gate.passed:
        reason = f"bf16 fails the accuracy gate: {gate.describe()}"
        served = "fp32"
    elif speedup < MIN_SPEEDUP:
        reason = f"bf16 passes the accuracy gate but measures {timed}, under {MIN_SPEEDUP}x"
        served = "fp32"
    else:
        reason = f"bf16 passes the accuracy gate ({gate.describe()}) and measures {timed}"
        served = "bf16"
    if verdict.synthetic:
        reason += "; only synthetic inputs were available to the gate (set runtime.accuracy_inputs to your own)"
    if cached:
        reason += " (cached from an earlier start)"
    record(module, PrecisionChoice("auto", served, gate, (gate,), verdict.call_ms, raced, reason, cached))
    log.log(logging.INFO if served == "bf16" or gate.passed else logging.WARNING,
            "model %r: precision auto serves %s: %s", module.name, served, reason)  # fmt: skip
    return reduced if served == "bf16" else None


def _wins(options: RuntimeOptions, verdict: _Verdict) -> bool:
    return _gate(options, verdict).passed and verdict.call_ms["fp32"] / verdict.call_ms["bf16"] >= MIN_SPEEDUP


def _fp32(module: InferenceModule, options: RuntimeOptions, reason: str) -> Reduced | None:
    """fp32 serves: recorded with why, and nothing to swap in."""
    log.info("model %r: precision auto serves fp32: %s", module.name, reason)
    record(module, PrecisionChoice("auto", "fp32", reason=reason, raced=raced_for(options.backend, options)))
    return None


def _gate(options: RuntimeOptions, verdict: _Verdict) -> Gate:
    cosine, agreement = options.accuracy_min_cosine, options.accuracy_min_agreement
    if verdict.synthetic:
        cosine, agreement = max(cosine, SYNTHETIC_MIN_COSINE), max(agreement, SYNTHETIC_MIN_AGREEMENT)
    return Gate(verdict.figures, cosine, agreement, verdict.inputs, "bf16")


def _measure(module: InferenceModule, options: RuntimeOptions, fp32: Runtime, bf16: Runtime) -> _Verdict:
    """The gate's figures on the held-out inputs, and both calls' medians at the served batch."""
    _, batches, described = held_out(module, options.accuracy_inputs, False)
    synthetic = not (options.accuracy_inputs or module.held_out)
    batched = all(spec.batched for spec in module.schema.inputs)
    figures = measure(_answers(fp32, module, batches), _answers(bf16, module, batches), batched)
    batch = max(1, options.max_batch_size) if batched else 1  # 0: batching is chosen after, from batch 1
    inputs = module.examples(batch)
    fp32_s, bf16_s = calmest_pair(lambda: fp32.run(inputs), lambda: bf16.run(inputs), REPEATS, MIN_SPEEDUP)
    return _Verdict(figures, described, synthetic, {"fp32": fp32_s * 1e3, "bf16": bf16_s * 1e3}, batch)


def _answers(runtime: Runtime, module: InferenceModule, batches: Sequence[Mapping[str, Array]]) -> list[list[Any]]:
    names = [spec.name for spec in module.schema.outputs]
    answers = []
    for batch in batches:
        got = runtime.run({name: np.ascontiguousarray(a) for name, a in batch.items()})
        answers.append([got[name] for name in names])
    return answers


def _verdict_path(module: InferenceModule, options: RuntimeOptions, fp32_name: str) -> Path | None:
    """Beside the exports, under what the figures depend on; None when the model's code cannot be
    read (its key would need an export)."""
    from inferpool.engine.backends.onnxruntime.export import source_key  # the exporter's imports: only here

    base = source_key(module)
    if base is None:
        return None
    accuracy = Path(options.accuracy_inputs).read_bytes() if options.accuracy_inputs else b""
    parts: list[str | bytes] = [base, "auto-precision", fp32_name, f"max_batch_size={options.max_batch_size}",
             importlib.metadata.version("openvino"), accuracy]  # fmt: skip
    return artifact_path(cache_dir(options.compile_cache_dir), module.name, content_key(parts), SUFFIX)


def _read(path: Path) -> _Verdict | None:
    try:
        saved = json.loads(path.read_text())
        figures = GateFigures(**saved.pop("figures"))
        return _Verdict(figures=figures, **saved)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write(path: Path, verdict: _Verdict) -> None:
    text = json.dumps({**asdict(verdict), "figures": asdict(verdict.figures)})

    def produce(target: Path) -> None:
        target.write_text(text)

    try:
        write_atomically(path, produce)
    except OSError as exc:
        log.info("precision auto: could not cache the verdict in %s (%s); the next start measures again", path, exc)
