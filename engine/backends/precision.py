"""``runtime.precision = "int8"``: the ONNX export quantized, served only if it passes an accuracy gate.

The quantizers (inferpool.engine.backends.quantize): ``dynamic`` int8 on MatMul and Gemm, and for
a graph with convolutions ``static`` QDQ int8 calibrated on inputs apart from the gate's
(inferpool.engine.backends.held_out). Both onnxruntime and openvino serve the same quantized files.
Every candidate is gated; of those that pass and fp32, the one whose example call measures
fastest at start-up is served (the timings are shown with the figures), since which is faster
depends on the model and the CPU: dynamic int8 leaves a CNN's convolutions in fp32, static int8
runs them in int8, and on a model as small as the digits CNN int8's extra (de)quantizing costs
more than it saves. fp32 is left out of that race when int8 is wanted regardless of speed
(``precision_strict``, or ``int8_methods`` named). The race runs once per process tree: a compile
for another thread plan, or in a serving process forked after the first, reuses its timings, so
that every process serves the same.

The gate (inferpool.engine.backends.gate): the quantized model's outputs against the fp32
model's (which passed the parity check against eager) on held-out inputs: ``accuracy_inputs``
(a JSONL file of the user's, one call a line, or an ``.npz``), else the model's own
(``ModelSpec.held_out``: MiniLM's 220 varied texts, the digits CNN's 360 test images, one call
each as requests send them, since dynamic int8 scales each call's activations by that call's
range), else the example inputs and seeded random variations of their float inputs. Embedding
items must have cosine >= ``accuracy_min_cosine`` to fp32's, classifier outputs top-1 agreement
>= ``accuracy_min_agreement`` (max |Δp| reported). A model whose every candidate fails is served
in fp32 with a warning naming the measured figures: an option asked for speed, and stopping the
server over it would turn a slower answer into no answer; ``precision_strict`` refuses to start
instead, for whoever would rather know.

``runtime.precision = "bf16"`` (openvino): the same export compiled with bfloat16 inference
precision, gated and raced against fp32 the same way. On a CPU with AMX it measured 2.2x fp32
on MiniLM at batch 1 and 2.6-3.3x at batch 16, min cosine 0.99997 (docs/BENCHMARKS.md); on one
without bf16 instructions the plugin runs fp32 anyway, and the race serves fp32. Its verdict
lives for the process tree (a compile setting leaves no file to cache figures beside).

Cached with each quantized file: the gate's figures are written beside it (``.gate.json``, keyed
by the file's bytes, the inputs they were measured on and the backend), so a warm start neither
quantizes nor measures again; the thresholds are applied to the cached figures at every start.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

import numpy as np

from inferpool.engine.backends.gate import Gate, GateFigures, measure
from inferpool.engine.backends.held_out import held_out
from inferpool.engine.backends.onnxruntime.export import OnnxExport
from inferpool.engine.backends.precision_choice import (
    PrecisionChoice,
    bf16_verdict,
    forget,
    precision_choice,
    raced_for,
    record,
)
from inferpool.engine.backends.quantize import SUFFIX, Quantizer, candidates, quantized
from inferpool.engine.compile_cache import content_key, write_atomically
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.models.onnx_source import OnnxFile
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array

__all__ = ["Gate", "GateFigures", "PrecisionChoice", "bf16_verdict", "measure", "precision_choice", "serve_precision"]
log = logging.getLogger(__name__)
TIMING_CALLS = (3, 200)
TIMING_SECONDS = 0.3
"""Per passing candidate when several pass: the example call's median over TIMING_SECONDS of
calls, at least and at most TIMING_CALLS of them (a ResNet-50's three, a digits CNN's 200)."""
Artifact = TypeVar("Artifact")


def _load_int8(
    module: InferenceModule,
    options: RuntimeOptions,
    exported: OnnxExport,
    quantizer: Quantizer,
    calibration: Sequence[dict[str, Array]],
    load: Callable[[Path], Artifact],
) -> tuple[Path, Artifact]:
    """The int8 file and its artifact; a cached file that does not load is quantized again."""
    path, fresh = quantized(module, options, exported, quantizer, calibration)
    try:
        return path, load(path)
    except ModelLoadError as exc:
        if fresh:
            raise
        log.warning("the cached int8 file %s is unusable, quantizing %r again: %s", path, module.name, exc)
    path, _ = quantized(module, options, exported, quantizer, calibration, rebuild=True)
    return path, load(path)


def _figures_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(SUFFIX) + ".gate.json")


def _inputs_key(path: Path, batches: Sequence[Mapping[str, Array]], backend: str) -> str:
    """Figures hold for this very file (its bytes), these inputs and this backend."""
    arrays = [np.ascontiguousarray(a).tobytes() for batch in batches for a in batch.values()]
    return content_key([backend, path.read_bytes(), *arrays])


def _cached_figures(path: Path, key: str) -> GateFigures | None:
    try:
        saved = json.loads(_figures_path(path).read_text())
        return GateFigures(**saved["figures"]) if saved.get("inputs_key") == key else None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _save_figures(path: Path, key: str, figures: GateFigures) -> None:
    text = json.dumps({"inputs_key": key, "figures": asdict(figures)}, indent=1)

    def produce(target: Path) -> None:
        target.write_text(text)

    try:
        write_atomically(_figures_path(path), produce)
    except OSError as exc:
        log.warning("cannot cache the int8 gate's figures beside %s: %s", path, exc)


def check_source(module: InferenceModule, options: RuntimeOptions) -> None:
    """An ``.onnx`` source is served as it is: int8 or bf16 asked by name is refused for it, before
    anything loads (``auto`` may still serve one in bf16: precision_auto compiles the file itself)."""
    if options.precision not in ("fp32", "auto") and isinstance(module.module, OnnxFile):
        raise ModelLoadError(
            f"precision {options.precision!r} quantizes the ONNX export of a torch model; {module.module.path} is "
            "served as it is: quantize the file yourself, or use precision 'fp32'"
        )


def _call_ms(
    run: Callable[[Artifact, Mapping[str, Array]], object], artifact: Artifact, inputs: Mapping[str, Array]
) -> float:
    run(artifact, inputs)  # the first call allocates
    durations: list[float] = []
    started = time.perf_counter()
    fewest, most = TIMING_CALLS
    while len(durations) < most and (time.perf_counter() - started < TIMING_SECONDS or len(durations) < fewest):
        begun = time.perf_counter()
        run(artifact, inputs)
        durations.append((time.perf_counter() - begun) * 1e3)
    return statistics.median(durations)


def serve_precision(
    module: InferenceModule,
    options: RuntimeOptions,
    backend: str,
    exported: OnnxExport,
    fp32: Artifact,
    load: Callable[[Path], Artifact],
    run: Callable[[Artifact, Mapping[str, Array]], Sequence[np.ndarray]],
    bf16: Callable[[], Artifact] | None = None,
) -> Artifact:
    """The artifact to serve for ``options.precision``: ``fp32`` itself, the int8 one ``load``
    builds from a quantized file, or the one ``bf16`` compiles, if it passes the gate (see the
    module docstring)."""
    if options.precision == "fp32":
        forget(module)
        return fp32
    if options.precision == "auto":  # the backend serves fp32; the auto rule may swap in bf16 after the race
        return fp32
    check_source(module, options)
    if options.precision == "bf16":
        assert bf16 is not None, f"backend {backend!r} has no bf16 build (RuntimeOptions checks BF16_BACKENDS)"
        return _serve_bf16(module, options, backend, fp32, bf16, run)
    quantizers = candidates(exported, options.int8_methods)
    calibration, batches, described = held_out(module, options.accuracy_inputs, any(q.calibrates for q in quantizers))
    batched = all(spec.batched for spec in module.schema.inputs)
    reference: list[Sequence[np.ndarray]] = []
    gates: list[Gate] = []
    passing: dict[str, Artifact] = {}
    unavailable = [] if quantizers else [f"none of {list(options.int8_methods)} applies (static needs convolutions)"]
    for quantizer in quantizers:
        try:
            path, int8 = _load_int8(module, options, exported, quantizer, calibration, load)
        except ModelLoadError as exc:
            unavailable.append(f"{quantizer.name}: {exc}")
            continue
        key = _inputs_key(path, batches, backend)
        figures = _cached_figures(path, key)
        if figures is None:
            reference = reference or [run(fp32, b) for b in batches]
            figures = measure(reference, [run(int8, b) for b in batches], batched)
            _save_figures(path, key, figures)
        gate = Gate(figures, options.accuracy_min_cosine, options.accuracy_min_agreement, described, quantizer.name)
        gates.append(gate)
        if gate.passed:
            passing[quantizer.name] = int8
    if not passing:
        why = "; ".join([*(g.describe() for g in gates), *unavailable])
        verdict = "fails the accuracy gate" if gates else "is unavailable"
        return _fp32_instead(module, options, f"model {module.name!r}: int8 {verdict}: {why}", tuple(gates), fp32)
    # Against fp32 too, unless int8 was asked for regardless of speed (strict, or named methods).
    against_fp32 = not (options.precision_strict or options.int8_methods)
    timed: dict[str, Artifact] = {**passing, **({"fp32": fp32} if against_fp32 else {})}
    timings: dict[str, float] = {}
    earlier, raced = precision_choice(module), raced_for(backend, options)
    if earlier is not None and earlier.raced == raced and set(earlier.call_ms) == set(timed):
        # Raced already in this process or the parent it was forked from (a rebuild for the thread
        # plan, a serving process): the same choice, so that every process serves the same int8.
        timings = dict(earlier.call_ms)
    elif len(timed) > 1:
        inputs = dict(module.example_inputs)
        timings = {name: _call_ms(run, artifact, inputs) for name, artifact in timed.items()}
    fastest = min(timed, key=lambda name: timings.get(name, 0.0))
    calls = ", ".join(f"{name} {ms:.3g} ms" for name, ms in timings.items())
    if fastest == "fp32":
        best = min(passing, key=timings.__getitem__)
        gate = next(g for g in gates if g.method == best)
        log.warning(
            "model %r: int8 passes the accuracy gate but measures slower than fp32 (example call: %s): serving "
            "fp32; precision_strict or int8_methods serves int8 anyway", module.name, calls,
        )  # fmt: skip
        record(module, PrecisionChoice("int8", "fp32", gate, tuple(gates), timings, raced))
        return fp32
    gate = next(g for g in gates if g.method == fastest)
    faster = f" (example call: {calls})" if timings else ""
    log.info("model %r: serving int8 (%s): %s%s", module.name, backend, gate.describe(), faster)
    record(module, PrecisionChoice("int8", "int8", gate, tuple(gates), timings, raced))
    return passing[fastest]


def _serve_bf16(
    module: InferenceModule,
    options: RuntimeOptions,
    backend: str,
    fp32: Artifact,
    build: Callable[[], Artifact],
    run: Callable[[Artifact, Mapping[str, Array]], Sequence[np.ndarray]],
) -> Artifact:
    """bf16 is a compile setting, not a file: gated and raced against fp32 once per process tree
    (a rebuild for the thread plan, or a forked serving process, reuses the verdict)."""
    earlier = bf16_verdict(module, options, backend)
    if earlier is not None:
        return build() if earlier == "bf16" else fp32
    raced = raced_for(backend, options)
    artifact = build()
    _, batches, described = held_out(module, options.accuracy_inputs, False)
    batched = all(spec.batched for spec in module.schema.inputs)
    figures = measure([run(fp32, b) for b in batches], [run(artifact, b) for b in batches], batched)
    gate = Gate(figures, options.accuracy_min_cosine, options.accuracy_min_agreement, described, "bf16")
    if not gate.passed:
        return _fp32_instead(module, options, f"model {module.name!r}: bf16 fails the accuracy gate: "
                             f"{gate.describe()}", (gate,), fp32)  # fmt: skip
    inputs = dict(module.example_inputs)
    timings = {"bf16": _call_ms(run, artifact, inputs), "fp32": _call_ms(run, fp32, inputs)}
    calls = ", ".join(f"{name} {ms:.3g} ms" for name, ms in timings.items())
    served = "bf16" if options.precision_strict or timings["bf16"] < timings["fp32"] else "fp32"
    record(module, PrecisionChoice("bf16", served, gate, (gate,), timings, raced))
    if served == "fp32":
        log.warning("model %r: bf16 passes the accuracy gate but measures slower than fp32 (example call: %s): "
                    "serving fp32; precision_strict serves bf16 anyway", module.name, calls)  # fmt: skip
        return fp32
    log.info("model %r: serving bf16 (%s): %s (example call: %s)", module.name, backend, gate.describe(), calls)
    return artifact


def _fp32_instead(
    module: InferenceModule, options: RuntimeOptions, message: str, gates: tuple[Gate, ...], fp32: Artifact
) -> Artifact:
    """int8 or bf16 was asked and cannot be served: fp32 with a warning, or refused (``precision_strict``)."""
    if options.precision_strict:
        raise ModelLoadError(
            f"{message}; precision_strict refuses to serve it: use precision 'fp32', or lower accuracy_min_cosine "
            "or accuracy_min_agreement"
        )
    log.warning("%s; serving fp32", message)
    raced = raced_for(options.backend, options)
    record(module, PrecisionChoice(options.precision, "fp32", gates[0] if gates else None, gates, {}, raced))
    return fp32
