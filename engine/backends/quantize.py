"""The int8 quantizers ``runtime.precision = "int8"`` chooses from, by name, and their cached files.

``dynamic``: ``quantize_dynamic`` on MatMul and Gemm (int8 weights, activations quantized per
call); MiniLM ran 2.6-2.9x faster, convolutions 3.5x *slower*, so they stay fp32 in it.
``static``: ``quantize_static`` in QDQ format with per-channel int8 weights and uint8
activations scaled from calibration inputs (inferpool.engine.backends.held_out) on Conv, MatMul
and Gemm; offered only for a graph with convolutions (on ResNet-50 2.2-3.7x fp32's items/s on
this VNNI CPU, under load; docs/BENCHMARKS.md, issue 31). OpenVINO runs the same QDQ file in int8
(its low-precision transformations read QuantizeLinear/DequantizeLinear pairs); NNCF, OpenVINO's
own post-training quantizer, is not used: it would add scipy and scikit-learn (~66 MB of wheels)
to an image for what the QDQ file already gives it.

Each file is named by a key over the export's key, the quantizer and its settings, onnxruntime's
version and, for ``static``, the calibration inputs (``<model>-<key>.int8.onnx``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine.backends.onnxruntime.export import OnnxExport, require
from inferpool.engine.compile_cache import artifact_path, cache_dir, content_key, write_atomically
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import INT8_METHODS, RuntimeOptions
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)
SUFFIX = ".int8.onnx"
DYNAMIC_OPS = ("MatMul", "Gemm")
STATIC_OPS = ("Conv", "MatMul", "Gemm")


@dataclass(frozen=True)
class Quantizer:
    name: str
    settings: str
    """What shapes the file, for its cache key."""
    calibrates: bool
    applies: Callable[[set[str]], bool]
    """Given the export's op types: is this quantizer worth trying on it."""
    produce: Callable[[Any, Path, Sequence[dict[str, Array]]], None]
    """(source model, target file, calibration batches)."""


def _dynamic(source: Any, target: Path, calibration: Sequence[dict[str, Array]]) -> None:
    quantization = require("onnxruntime.quantization")
    quantization.quantize_dynamic(
        source, str(target), weight_type=quantization.QuantType.QInt8, op_types_to_quantize=list(DYNAMIC_OPS)
    )


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    """onnxruntime's quantizers log, on the root logger, advice to run its pre-processing first: it
    is for whoever calls them, which is this module, and reads as a problem in a server's log."""
    return not (record.name == "root" and record.getMessage().startswith("Please consider"))


def _static(source: Any, target: Path, calibration: Sequence[dict[str, Array]]) -> None:
    quantization = require("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self._batches = iter(calibration)

        def get_next(self) -> dict[str, Array] | None:
            return next(self._batches, None)

    quantization.quantize_static(
        source, str(target), Reader(), quant_format=quantization.QuantFormat.QDQ, per_channel=True,
        activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8,
        op_types_to_quantize=list(STATIC_OPS),
    )  # fmt: skip


QUANTIZERS = {
    "dynamic": Quantizer(
        "dynamic", f"quantize_dynamic weight_type=QInt8 per_channel=False op_types={','.join(DYNAMIC_OPS)}",
        calibrates=False, applies=lambda ops: True, produce=_dynamic,
    ),
    "static": Quantizer(
        "static", f"quantize_static QDQ per_channel=True QUInt8/QInt8 minmax op_types={','.join(STATIC_OPS)}",
        calibrates=True, applies=lambda ops: "Conv" in ops, produce=_static,
    ),
}  # fmt: skip


def op_types(exported: OnnxExport) -> set[str]:
    onnx = require("onnx")
    model = exported.model
    graph = (onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))).graph
    return {node.op_type for node in graph.node}


assert tuple(QUANTIZERS) == INT8_METHODS, "RuntimeOptions.int8_methods validates against these names"


def candidates(exported: OnnxExport, names: tuple[str, ...] = ()) -> list[Quantizer]:
    """The quantizers named (() = all) that apply to the export's ops."""
    ops = op_types(exported)
    return [q for q in QUANTIZERS.values() if (not names or q.name in names) and q.applies(ops)]


def quantized(
    module: InferenceModule,
    options: RuntimeOptions,
    exported: OnnxExport,
    quantizer: Quantizer,
    calibration: Sequence[dict[str, Array]] = (),
    *,
    rebuild: bool = False,
) -> tuple[Path, bool]:
    """The cached int8 file of ``exported`` by ``quantizer``, quantized now if absent (or
    ``rebuild``), and whether it was quantized now."""
    require("onnxruntime.quantization")
    data = [np.ascontiguousarray(a).tobytes() for b in calibration for a in b.values()] if quantizer.calibrates else []
    key = content_key([exported.key, quantizer.settings, require("onnxruntime").__version__, *data])
    path = artifact_path(cache_dir(options.compile_cache_dir), module.name, key, SUFFIX)
    if path.is_file() and not rebuild:
        return path, False
    model = exported.model  # bytes: an unwritable cache, the export in memory
    source = require("onnx").load_from_string(model) if isinstance(model, bytes) else str(model)
    root = logging.getLogger()
    root.addFilter(_no_preprocessing_advice)
    try:
        write_atomically(path, lambda target: quantizer.produce(source, target, calibration))
    except Exception as exc:
        raise ModelLoadError(
            f"cannot quantize model {module.name!r} to int8 ({quantizer.name}): {exc}; use precision 'fp32'"
        ) from exc
    finally:
        root.removeFilter(_no_preprocessing_advice)
    log.info("model %r: quantized to int8 (%s) -> %s", module.name, quantizer.name, path)
    return path, True
