"""ONNX Runtime: the model exported to ONNX once, one InferenceSession shared by every runtime.

``compile`` builds the session once per model (the AOTInductor/Static Runtime split): ORT's
``Run`` is thread-safe and releases the GIL, and each extra session would hold its own copy of
the weights (~90 MB each on MiniLM). A runtime keeps only its RunOptions. The export itself is
cached on disk (engine.backends.onnx_export): a restart builds the session from the file.

Plain ``session.run`` with numpy inputs, not ``run_with_iobinding``: on the digits CNN (1
thread, median of 15 x 300 calls) run took 21 us at batch 1 and 200 us at batch 32, an
IOBinding per runtime 25 / 205 us, and one with preallocated output buffers 29 / 211 us --
binding costs more Python calls per request than the copies it saves on tensors this small.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.backends.base import Runtime
from engine.backends.onnx_export import KEY_METADATA, OnnxExport, Progress, ensure_export, require
from engine.backends.parity import Tolerance, eager_outputs, first_mismatch
from engine.errors import ModelLoadError
from engine.module import InferenceModule
from engine.options import RuntimeOptions
from engine.schema import Array
from engine.sources import load_model

log = logging.getLogger(__name__)


def session_options(options: RuntimeOptions) -> Any:
    """Serving options. ORT_ENABLE_ALL because its layout transforms matter on convolutions
    (digits CNN, 1 thread: batch 32 in 270 us against 565 us at BASIC or EXTENDED); on MiniLM the
    levels are within noise. The memory arena and memory patterns stay on: turning either off
    changed neither speed nor RSS measurably on MiniLM or digits (cleanup_activations shrinks the
    arena after each run instead). Weight prepacking stays on: without it MiniLM's batch 1 took 2x."""
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    # The thread plan's per-runtime count. One creates no ORT thread, so a session built in a
    # parent keeps working in forked children; with more, the session's pool threads stay in
    # the parent and a child's runs (still correct: unclaimed work runs on the caller) use one.
    so.intra_op_num_threads = options.intra_op_threads
    # Requests already run in parallel on the runtimes; inter-op parallelism would only
    # add threads competing for the same cores (as in engine.threads for torch).
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return so


def check_parity(module: InferenceModule, session: Any) -> None:
    """Run the example inputs through ORT and eager once: a model that exported into
    something else (a silently specialised shape, a wrong op) fails at load, not in traffic."""
    names = [s.name for s in module.schema.outputs]
    got = session.run(names, dict(module.example_inputs))
    wrong = first_mismatch(names, got, eager_outputs(module, module.example_inputs), OnnxRuntime.tolerance)
    if wrong is not None:
        raise ModelLoadError(
            f"the ONNX export of {module.name!r} disagrees with the eager model on output {wrong!r}; "
            "use backend 'eager'"
        )


def _checked_session(module: InferenceModule, options: RuntimeOptions, exported: OnnxExport) -> Any:
    """A session on ``exported`` that answers as the eager model does, or ModelLoadError."""
    ort = require("onnxruntime")
    model = str(exported.model) if isinstance(exported.model, Path) else exported.model
    where = exported.describe()
    try:
        session = ort.InferenceSession(model, session_options(options), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelLoadError(f"onnxruntime cannot load the ONNX export of {module.name!r} ({where}): {exc}") from exc
    key = session.get_modelmeta().custom_metadata_map.get(KEY_METADATA)
    names = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    want = ([s.name for s in module.schema.inputs], [s.name for s in module.schema.outputs])
    if key != exported.key or names != want:
        raise ModelLoadError(
            f"{where} is not the ONNX export of {module.name!r} it is named for (key {key!r}, inputs and "
            f"outputs {names}; expected {exported.key!r}, {want})"
        )
    check_parity(module, session)
    return session


def load_session(
    module: InferenceModule, options: RuntimeOptions, progress: Progress = log.debug
) -> tuple[Any, OnnxExport]:
    """The model's session, checked against eager, from its cached export or a new one. A cached
    file that does not load, is not what its name says or disagrees with eager is exported
    again (with a warning naming it): a cache must never be a reason not to start."""
    require("onnxruntime")  # before exporting, and so that its absence is not taken for a bad file
    exported = ensure_export(module, options, progress)
    try:
        return _checked_session(module, options, exported), exported
    except ModelLoadError as exc:
        if exported.export_seconds is not None:
            raise  # exported just now: the model itself does not survive the export
        log.warning("the cached ONNX export %s is unusable, exporting %r again: %s", exported.model, module.name, exc)
    exported = ensure_export(module, options, progress, rebuild=True)
    return _checked_session(module, options, exported), exported


def compile_model(source: str, options: RuntimeOptions, progress: Progress = log.info) -> OnnxExport:
    """``inferpool compile``: load the model from ``source`` and make sure its ONNX export is
    cached and loads with the eager model's answers."""
    progress(f"loading {source}")
    return load_session(InferenceModule.from_spec(load_model(source)), options, progress)[1]


class OnnxRuntime(Runtime):
    """Runs the shared ``onnxruntime.InferenceSession`` built by :meth:`compile`."""

    shared = ("session", object)
    threaded_artifact = True
    tolerance = Tolerance(rtol=1e-3, atol=1e-5)  # ORT fuses and reorders float ops

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        super().__init__(module, options, compiled)
        self._inputs = tuple(s.name for s in module.schema.inputs)
        self._outputs = [s.name for s in module.schema.outputs]
        self._run_options = require("onnxruntime").RunOptions()
        if options.cleanup_activations:
            # Return the arena's free chunks after each run: a large batch otherwise keeps its
            # activations resident (+100 MB after one batch of 8192 digits). No measurable
            # cost at batch 1 or 32.
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> Any:
        return load_session(module, options)[0]

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        outputs = self.compiled.run(self._outputs, {name: inputs[name] for name in self._inputs}, self._run_options)
        self.calls += 1
        return dict(zip(self._outputs, outputs, strict=True))
