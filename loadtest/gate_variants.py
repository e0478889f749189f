"""The int8 gate's figures for each dynamic-int8 variant of MiniLM, on its held-out texts (issue 31).

    python -m loadtest.gate_variants [--openvino]

Each held-out text (``inferpool.engine.zoo.minilm.HELD_OUT_TEXTS``, one JSONL line each) is one
call, tokenized as the handler does, as a one-sentence request is served. The fp32 ONNX export
(onnxruntime) is the reference; each variant's embeddings are compared with it per text: min
and mean cosine (the gate's figures, ``inferpool.engine.backends.precision.measure``), and how
many texts fall under 0.99. Variants: onnxruntime's ``quantize_dynamic`` on MatMul/Gemm with
int8 weights per tensor (what ``precision = "int8"`` serves), per channel, uint8 weights; and
``--openvino``: OpenVINO running the per-tensor int8 file.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from inferpool.engine import InferenceModule, RuntimeOptions, load_model
from inferpool.engine.backends.onnxruntime.export import ensure_export, require
from inferpool.engine.backends.precision import measure
from inferpool.engine.backends.quantize import DYNAMIC_OPS as OP_TYPES
from inferpool.engine.schema import Array

Run = Callable[[dict[str, Array]], np.ndarray]


def ort_session(path: Path) -> Run:
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def openvino_model(path: Path) -> Run:
    ov = require("openvino")
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return lambda feeds: next(iter(compiled(feeds).values()))


def quantize(source: Path, target: Path, *, per_channel: bool, unsigned: bool) -> Path:
    quantization = require("onnxruntime.quantization")
    weight = quantization.QuantType.QUInt8 if unsigned else quantization.QuantType.QInt8
    quantization.quantize_dynamic(
        str(source), str(target), weight_type=weight, per_channel=per_channel, op_types_to_quantize=list(OP_TYPES)
    )
    return target


def figures(reference: Sequence[np.ndarray], run: Run, inputs: Sequence[dict[str, Array]]) -> str:
    got = [run(batch) for batch in inputs]
    gate = measure([[r] for r in reference], [[g] for g in got], batched=True)
    cosines = [
        float(np.dot(r[0], g[0]) / (np.linalg.norm(r[0]) * np.linalg.norm(g[0])))
        for r, g in zip(reference, got, strict=True)
    ]
    under = sum(c < 0.99 for c in cosines)
    return f"min {gate.min_cosine:.4f}  mean {gate.mean_cosine:.4f}  under 0.99: {under} of {gate.items}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--openvino", action="store_true", help="also OpenVINO on the per-tensor int8 file")
    args = parser.parse_args()
    module = InferenceModule.from_spec(load_model("inferpool.engine.zoo.minilm:build"))
    inputs = [dict(batch) for batch in module.held_out]
    exported = ensure_export(module, RuntimeOptions())
    assert isinstance(exported.model, Path), "the export cache must be writable for this script"
    reference = [ort_session(exported.model)(batch) for batch in inputs]
    print(f"MiniLM, {len(inputs)} held-out texts, one call each; fp32 onnxruntime is the reference")
    with tempfile.TemporaryDirectory(prefix="inferpool-gate-") as scratch:
        variants = {
            "onnxruntime int8, per tensor (served)": dict(per_channel=False, unsigned=False),
            "onnxruntime int8, per channel": dict(per_channel=True, unsigned=False),
            "onnxruntime uint8, per tensor": dict(per_channel=False, unsigned=True),
            "onnxruntime uint8, per channel": dict(per_channel=True, unsigned=True),
        }
        files: dict[str, Path] = {}
        for name, how in variants.items():
            files[name] = quantize(exported.model, Path(scratch) / f"{len(files)}.onnx", **how)
            print(f"{name:40} {figures(reference, ort_session(files[name]), inputs)}")
        if args.openvino:
            served = files["onnxruntime int8, per tensor (served)"]
            print(f"{'openvino on the per-tensor int8 file':40} {figures(reference, openvino_model(served), inputs)}")


if __name__ == "__main__":
    main()
