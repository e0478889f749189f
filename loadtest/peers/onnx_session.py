"""The onnxruntime session the peers serve the digits export with: as ``session_options`` in
engine/backends/onnxruntime/runtime.py builds it for one intra-op thread, so a peer's model call is
the one InferPool's no-flag path makes. Imports only onnxruntime: the Triton peer's venv has
neither torch nor InferPool."""

from __future__ import annotations

import onnxruntime as ort


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
