"""``runtime.precision = "int8"``: the ONNX export quantized, served only if it passes an accuracy gate.

Dynamic int8 (``onnxruntime.quantization.quantize_dynamic``: int8 weights, activations quantized
per call) on MatMul and Gemm only, the ops where it measured faster (MiniLM 2.6-2.9x); on
convolutions it measured 3.5x *slower*, so they stay fp32 (issue 31). Both onnxruntime and
openvino serve the same quantized file (OpenVINO reads its MatMulInteger and
DynamicQuantizeLinear). Static QDQ / NNCF quantization with calibration is not built.

The gate: the quantized model's outputs against the fp32 model's (which passed the parity check
against eager) on held-out inputs: ``accuracy_inputs`` (an ``.npz`` of arrays named as the
model's inputs), else the model's own (``ModelSpec.held_out``: MiniLM's 220 varied texts, one
call each as requests send them, since dynamic int8 scales each call's activations by that
call's range), else the example inputs and seeded random variations of their float inputs.
Every float output item (a row of a batched output) must have cosine >= ``accuracy_min_cosine``
to its fp32 counterpart, and integer outputs (labels) must agree on >= ``accuracy_min_agreement``
of the items. A model that fails is served in fp32 with a warning naming the measured figure:
an option asked for speed, and stopping the server over it would turn a slower answer into no
answer; ``precision_strict`` refuses to start instead, for whoever would rather know.

Cached with the export: the quantized file is named by a key over the export's key, the
quantizer and its settings (``<model>-<key>.int8.onnx``), and the gate's figures are written beside
it (``.gate.json``, keyed by the inputs they were measured on), so a warm start neither quantizes
nor measures again; the thresholds are applied to the cached figures at every start.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from inferpool.engine.backends.onnx_export import OnnxExport, require
from inferpool.engine.backends.parity import random_inputs
from inferpool.engine.compile_cache import artifact_path, cache_dir, content_key, write_atomically
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.module import InferenceModule
from inferpool.engine.onnx_source import OnnxFile
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)
SUFFIX = ".int8.onnx"
OP_TYPES = ("MatMul", "Gemm")
QUANTIZER = f"quantize_dynamic weight_type=QInt8 per_channel=False op_types={','.join(OP_TYPES)}"
GATE_BATCH = 8
GATE_SEEDS = 4
"""Random variations of the example inputs: GATE_SEEDS batches of GATE_BATCH items."""
Artifact = TypeVar("Artifact")


@dataclass(frozen=True)
class GateFigures:
    """int8 against fp32 on the gate's inputs."""

    items: int
    min_cosine: float
    mean_cosine: float
    max_abs_diff: float
    agreement: float | None
    """Share of items whose integer outputs (labels) are equal; None without integer outputs."""


@dataclass(frozen=True)
class Gate:
    figures: GateFigures
    min_cosine: float
    min_agreement: float
    inputs: str

    @property
    def passed(self) -> bool:
        agreement = self.figures.agreement
        return self.figures.min_cosine >= self.min_cosine and (agreement is None or agreement >= self.min_agreement)

    def describe(self) -> str:
        f = self.figures
        agree = "" if f.agreement is None else f", label agreement {f.agreement:.4f} (needs {self.min_agreement})"
        return (
            f"min cosine {f.min_cosine:.4f} (needs {self.min_cosine}), mean {f.mean_cosine:.4f}{agree}, "
            f"max |diff| {f.max_abs_diff:.3g} over {f.items} items of {self.inputs}"
        )


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``/v2/models/{name}/config`` shows: asked, served, and the gate's figures."""

    configured: str
    served: str
    gate: Gate | None = None

    def report(self) -> dict[str, Any]:
        gate = None if self.gate is None else {**asdict(self.gate), "passed": self.gate.passed}
        return {"configured": self.configured, "served": self.served, "gate": gate}


_choices: weakref.WeakKeyDictionary[torch.nn.Module, PrecisionChoice] = weakref.WeakKeyDictionary()


def precision_choice(module: InferenceModule) -> PrecisionChoice | None:
    """The last precision decision for ``module`` in this process (None: fp32 was asked)."""
    return _choices.get(module.module)


def quantized(
    module: InferenceModule, options: RuntimeOptions, exported: OnnxExport, *, rebuild: bool = False
) -> tuple[Path, bool]:
    """The cached int8 file of ``exported``, quantized now if absent (or ``rebuild``), and
    whether it was quantized now."""
    quantization = require("onnxruntime.quantization")
    key = content_key([exported.key, QUANTIZER, require("onnxruntime").__version__])
    path = artifact_path(cache_dir(options.compile_cache_dir), module.name, key, SUFFIX)
    if path.is_file() and not rebuild:
        return path, False
    model = exported.model  # bytes: an unwritable cache, the export in memory
    source = require("onnx").load_from_string(model) if isinstance(model, bytes) else str(model)

    def produce(target: Path) -> None:
        quantization.quantize_dynamic(
            source, str(target), weight_type=quantization.QuantType.QInt8, op_types_to_quantize=list(OP_TYPES)
        )

    try:
        write_atomically(path, produce)
    except Exception as exc:
        raise ModelLoadError(f"cannot quantize model {module.name!r} to int8: {exc}; use precision 'fp32'") from exc
    log.info("model %r: quantized to int8 -> %s", module.name, path)
    return path, True


def _load_int8(
    module: InferenceModule, options: RuntimeOptions, exported: OnnxExport, load: Callable[[Path], Artifact]
) -> tuple[Path, Artifact]:
    """The int8 file and its artifact; a cached file that does not load is quantized again."""
    path, fresh = quantized(module, options, exported)
    try:
        return path, load(path)
    except ModelLoadError as exc:
        if fresh:
            raise
        log.warning("the cached int8 file %s is unusable, quantizing %r again: %s", path, module.name, exc)
    path, _ = quantized(module, options, exported, rebuild=True)
    return path, load(path)


def gate_inputs(module: InferenceModule, options: RuntimeOptions) -> tuple[list[dict[str, Array]], str]:
    """The held-out batches and what they are (for the figures' description)."""
    names = [s.name for s in module.schema.inputs]
    if options.accuracy_inputs:
        try:
            with np.load(options.accuracy_inputs) as data:
                batch = {name: np.ascontiguousarray(data[name]) for name in names}
        except (OSError, KeyError, ValueError) as exc:
            raise ModelLoadError(
                f"accuracy_inputs {options.accuracy_inputs!r} is not an .npz of arrays named {names}: {exc}"
            ) from exc
        return [batch], options.accuracy_inputs
    if module.held_out:
        return [dict(batch) for batch in module.held_out], f"the model's {len(module.held_out)} held-out inputs"
    batched = all(spec.batched for spec in module.schema.inputs)
    examples = module.examples(GATE_BATCH) if batched else dict(module.example_inputs)
    batches = [dict(module.example_inputs), *(random_inputs(examples, seed) for seed in range(GATE_SEEDS))]
    return batches, f"the example inputs and {GATE_SEEDS} seeded random variations"


def _rows(array: np.ndarray, batched: bool) -> np.ndarray:
    array = np.asarray(array, dtype=np.float64)
    return array.reshape(array.shape[0], -1) if batched and array.ndim > 0 else array.reshape(1, -1)


def measure(fp32: Sequence[Sequence[np.ndarray]], int8: Sequence[Sequence[np.ndarray]], batched: bool) -> GateFigures:
    """Per batch, per output: cosine per item of float outputs, agreement of integer ones."""
    cosines: list[np.ndarray] = []
    agreements: list[np.ndarray] = []
    worst = 0.0
    for want_outputs, got_outputs in zip(fp32, int8, strict=True):
        for want, got in zip(want_outputs, got_outputs, strict=True):
            if np.asarray(want).dtype.kind != "f":
                equal = _rows(got, batched) == _rows(want, batched)
                agreements.append(equal.all(axis=1))
                continue
            a, b = _rows(want, batched), _rows(got, batched)
            worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)))
            norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
            both_zero = (np.linalg.norm(a, axis=1) == 0) & (np.linalg.norm(b, axis=1) == 0)
            cosine = np.where(both_zero, 1.0, np.sum(a * b, axis=1) / np.maximum(norms, 1e-30))
            cosines.append(cosine)
    every = np.concatenate(cosines) if cosines else np.ones(1)
    agreement = float(np.concatenate(agreements).mean()) if agreements else None
    items = max(len(every), len(np.concatenate(agreements)) if agreements else 0)
    return GateFigures(items, float(every.min()), float(every.mean()), worst, agreement)


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
    """An ``.onnx`` source is served as it is: int8 is refused for it, before anything loads."""
    if options.precision != "fp32" and isinstance(module.module, OnnxFile):
        raise ModelLoadError(
            f"precision {options.precision!r} quantizes the ONNX export of a torch model; {module.module.path} is "
            "served as it is: quantize the file yourself, or use precision 'fp32'"
        )


def serve_precision(
    module: InferenceModule,
    options: RuntimeOptions,
    backend: str,
    exported: OnnxExport,
    fp32: Artifact,
    load: Callable[[Path], Artifact],
    run: Callable[[Artifact, Mapping[str, Array]], Sequence[np.ndarray]],
) -> Artifact:
    """The artifact to serve for ``options.precision``: ``fp32`` itself, or the int8 one
    ``load`` builds from the quantized file when it passes the gate (see the module docstring)."""
    if options.precision == "fp32":
        _choices.pop(module.module, None)
        return fp32
    check_source(module, options)
    try:
        path, int8 = _load_int8(module, options, exported, load)
    except ModelLoadError as exc:
        return _fp32_instead(module, options, f"model {module.name!r}: int8 is unavailable: {exc}", None, fp32)
    batches, described = gate_inputs(module, options)
    key = _inputs_key(path, batches, backend)
    figures = _cached_figures(path, key)
    if figures is None:
        batched = all(spec.batched for spec in module.schema.inputs)
        figures = measure([run(fp32, b) for b in batches], [run(int8, b) for b in batches], batched)
        _save_figures(path, key, figures)
    gate = Gate(figures, options.accuracy_min_cosine, options.accuracy_min_agreement, described)
    if gate.passed:
        log.info("model %r: serving int8 (%s): %s", module.name, backend, gate.describe())
        _choices[module.module] = PrecisionChoice("int8", "int8", gate)
        return int8
    return _fp32_instead(module, options, f"model {module.name!r}: int8 fails the accuracy gate: {gate.describe()}",
                         gate, fp32)  # fmt: skip


def _fp32_instead(
    module: InferenceModule, options: RuntimeOptions, message: str, gate: Gate | None, fp32: Artifact
) -> Artifact:
    """int8 was asked and cannot be served: fp32 with a warning, or refused (``precision_strict``)."""
    if options.precision_strict:
        raise ModelLoadError(
            f"{message}; precision_strict refuses to serve it: use precision 'fp32', or lower accuracy_min_cosine"
        )
    log.warning("%s; serving fp32", message)
    _choices[module.module] = PrecisionChoice("int8", "fp32", gate)
    return fp32
