"""ONNX Runtime: the model exported to ONNX once, one InferenceSession shared by every runtime.

``compile`` exports and builds the session once per model (the AOTInductor/Static Runtime
split): ORT's ``Run`` is thread-safe and releases the GIL, and each extra session would hold
its own copy of the weights (~90 MB each on MiniLM). A runtime keeps only its RunOptions.

Plain ``session.run`` with numpy inputs, not ``run_with_iobinding``: on the digits CNN (1
thread, median of 15 x 300 calls) run took 21 us at batch 1 and 200 us at batch 32, an
IOBinding per runtime 25 / 205 us, and one with preallocated output buffers 29 / 211 us --
binding costs more Python calls per request than the copies it saves on tensors this small.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from engine.backends.base import Runtime
from engine.errors import ModelLoadError
from engine.module import InferenceModule, flatten_outputs
from engine.options import RuntimeOptions
from engine.schema import Array, TensorSpec

INSTALL_HINT = "pip install 'inferpool[onnx]'"
# The exporter logs a warning for each torchvision op it cannot register when torchvision is
# absent; those ops are irrelevant unless the model uses them (then the export fails loudly).
_EXPORTER_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"


def _require(package: str) -> Any:
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ModelLoadError(
            f"backend 'onnxruntime' needs the {package!r} package, which is not installed ({exc}); "
            f"install it with: {INSTALL_HINT}, or use backend 'eager'"
        ) from exc


@contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's internal deprecation chatter and registry logging: nothing in
    it is actionable for whoever serves the model, and real export problems raise. Not
    thread-safe (warnings filters are global), which is fine: compile runs once, at load."""
    registry_log = logging.getLogger(_EXPORTER_REGISTRY_LOGGER)
    level = registry_log.level
    registry_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            # InferenceModule.from_spec already called eval(); a module still in training mode
            # is one unlifted from torch.export, whose graph was captured in eval mode anyway.
            warnings.filterwarnings("ignore", message="Exporting a model while it is in training mode")
            yield
    finally:
        registry_log.setLevel(level)


def _export_example(spec: TensorSpec, example: Array) -> torch.Tensor:
    # torch.export specialises a dimension whose example size is 0 or 1, so a batch-1
    # example would bake batch=1 into the graph; repeat it to batch 2.
    if spec.batched and example.shape[0] < 2:
        example = np.concatenate([example] * 2)
    return torch.from_numpy(np.ascontiguousarray(example))


def export_onnx(module: InferenceModule) -> bytes:
    """The module as a serialised ONNX model, batch dimension dynamic. In memory, never on disk.

    Uses the torch.export-based exporter (``dynamo=True``): the TorchScript one is deprecated
    and cannot trace modules unlifted from a .pt2 archive. Models over protobuf's 2 GB limit
    do not fit in memory this way.
    """
    _require("onnxscript")  # the dynamo exporter's op library; torch imports it lazily
    schema = module.schema
    examples = tuple(_export_example(s, module.example_inputs[s.name]) for s in schema.inputs)
    dynamic = tuple(
        {i: torch.export.Dim.DYNAMIC for i, d in enumerate(s.shape) if d is None} or None for s in schema.inputs
    )
    try:
        with _quiet_exporter():
            program = torch.onnx.export(
                module.module,
                examples,
                dynamo=True,
                input_names=[s.name for s in schema.inputs],
                output_names=[s.name for s in schema.outputs],
                dynamic_shapes=dynamic,
                optimize=True,  # folds the shape arithmetic the exporter emits around Reshape
                verbose=False,
            )
        if program is None:
            raise RuntimeError("torch.onnx.export returned no program")
        model: bytes = program.model_proto.SerializeToString()
    except Exception as exc:
        raise ModelLoadError(f"cannot export model {module.name!r} to ONNX: {exc}; use backend 'eager'") from exc
    return model


def session_options(options: RuntimeOptions) -> Any:
    ort = _require("onnxruntime")
    so = ort.SessionOptions()
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
    with torch.inference_mode():
        want = flatten_outputs(module.module(*(torch.from_numpy(a) for a in module.example_inputs.values())))
    for name, ours, theirs in zip(names, got, want, strict=True):
        expected = theirs.numpy()
        same = ours.shape == expected.shape and ours.dtype == expected.dtype
        if same and expected.dtype.kind == "f":
            same = bool(np.allclose(ours, expected, rtol=1e-3, atol=1e-5))
        if not same:
            raise ModelLoadError(
                f"the ONNX export of {module.name!r} disagrees with the eager model on output {name!r} "
                f"(got {ours.dtype}{list(ours.shape)}, expected {expected.dtype}{list(expected.shape)}); "
                "use backend 'eager'"
            )


class OnnxRuntime(Runtime):
    """Runs the shared ``onnxruntime.InferenceSession`` built by :meth:`compile`."""

    shared = ("session", object)

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        super().__init__(module, options, compiled)
        self._inputs = tuple(s.name for s in module.schema.inputs)
        self._outputs = [s.name for s in module.schema.outputs]
        ort = _require("onnxruntime")
        self._run_options = ort.RunOptions()
        if options.cleanup_activations:
            # Return the arena's free chunks after each run: a large batch otherwise keeps its
            # activations resident (+100 MB after one batch of 8192 digits). No measurable
            # cost at batch 1 or 32.
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> Any:
        ort = _require("onnxruntime")
        model = export_onnx(module)
        try:
            session = ort.InferenceSession(model, session_options(options), providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelLoadError(f"onnxruntime cannot load the ONNX export of {module.name!r}: {exc}") from exc
        check_parity(module, session)
        return session

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        outputs = self.compiled.run(self._outputs, {name: inputs[name] for name in self._inputs}, self._run_options)
        self.calls += 1
        return dict(zip(self._outputs, outputs, strict=True))
