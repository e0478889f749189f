"""OpenVINO: the model's ONNX export (or the ``.onnx`` source) compiled once per serving process.

``compile`` reads the file the onnxruntime backend exports and caches
(inferpool.engine.backends.onnxruntime.export) and builds one ``CompiledModel``; every runtime holds one
infer request on it, so the weights exist once. OpenVINO runs concurrent infer requests in
parallel only on separate *streams*, so the compiled model has one stream per runtime of the
thread plan and ``intra_op_threads`` threads in each (the plan's total); one stream shared by
two runtimes measured the same items/s as one runtime.

Precision: ``INFERENCE_PRECISION_HINT`` is pinned to f32. On a CPU with bf16 instructions the
plugin's default is bf16, which fails the parity check against eager (or, worse, would pass a
loose one); reduced precision is ``runtime.precision``'s business (inferpool.engine.backends.precision),
behind its accuracy gate: ``bf16`` compiles the same file with the hint at bf16. CPU pinning
is off: serving processes and other tenants share cores.

Fork safety (measured, tests/e2e/service/test_processes.py): a compiled model with one stream
and one thread answers in a forked child; one with two streams hangs the child's first infer
(its stream threads stayed in the parent), while a model compiled afresh in the child works. So
a forked process rebuilds its own whenever the parent's has more than one stream or thread or
its plan wants more (``needs_own_artifact``), as onnxruntime does for more intra-op threads.
The wide lane (inferpool.engine.plan.wide: one stream of every core, for a call alone in the pod)
is never compiled in a parent that forks: a fresh interpreter times it
(inferpool.engine.backends.openvino_probe), and each forked process builds its own.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.onnxruntime.export import OnnxExport, ensure_export
from inferpool.engine.backends.onnxruntime.export import release_weights as release_into_cache
from inferpool.engine.backends.parity import Tolerance, eager_outputs, first_mismatch
from inferpool.engine.backends.precision import check_source, serve_precision
from inferpool.engine.backends.precision_choice import bf16_verdict
from inferpool.engine.errors import ModelLoadError, import_optional
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.models.onnx_source import OnnxFile
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)
_exports: weakref.WeakKeyDictionary[torch.nn.Module, OnnxExport] = weakref.WeakKeyDictionary()
"""The export each torch model was last compiled from, for ``release_weights``."""
INSTALL_HINT = "pip install 'inferpool[openvino]'"
DEVICE = "CPU"


def require() -> Any:
    return import_optional("openvino", "backend 'openvino'", f"{INSTALL_HINT}, or use backend 'onnxruntime'")


@cache
def core() -> Any:
    """One ``ov.Core`` per process (it holds the loaded plugins); a forked child keeps using it."""
    return require().Core()


@dataclass(frozen=True)
class CompiledOpenVino:
    """The shared compiled model and the stream layout it was built with."""

    model: Any
    streams: int
    threads_per_stream: int
    source: str

    @property
    def threads(self) -> int:
        return self.streams * self.threads_per_stream


PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}
"""``runtime.precision`` to the plugin's ``INFERENCE_PRECISION_HINT`` (int8 is a quantized file, run in f32 mode)."""


def compile_config(streams: int, threads_per_stream: int, precision: str = "fp32") -> dict[str, Any]:
    return {
        "NUM_STREAMS": streams,
        "INFERENCE_NUM_THREADS": streams * threads_per_stream,
        "INFERENCE_PRECISION_HINT": PRECISION_HINTS[precision],
        "ENABLE_CPU_PINNING": False,
    }


def model_file(module: InferenceModule, options: RuntimeOptions) -> tuple[Path | bytes, str, OnnxExport | None]:
    """The ONNX model to compile: the source file itself, or the cached export of a torch model."""
    if isinstance(module.module, OnnxFile):
        check_source(module, options)
        return module.module.path, str(module.module.path), None
    exported = ensure_export(module, options)
    return exported.model, exported.describe(), exported


def compile_file(
    module: InferenceModule, model: Path | bytes, where: str, streams: int, threads_per_stream: int,
    precision: str = "fp32",
) -> CompiledOpenVino:  # fmt: skip
    ov_core = core()
    try:
        if isinstance(model, Path):
            read = ov_core.read_model(str(model))
        else:  # an unwritable cache: the export's bytes
            read = ov_core.read_model(model, require().Tensor(np.empty(0, dtype=np.uint8)))
        compiled = ov_core.compile_model(read, DEVICE, compile_config(streams, threads_per_stream, precision))
    except Exception as exc:
        raise ModelLoadError(f"openvino cannot compile the ONNX model of {module.name!r} ({where}): {exc}") from exc
    names = ([i.get_any_name() for i in compiled.inputs], [o.get_any_name() for o in compiled.outputs])
    want = ([s.name for s in module.schema.inputs], [s.name for s in module.schema.outputs])
    if names != want:
        raise ModelLoadError(f"{where} has inputs and outputs {names}; model {module.name!r} has {want}")
    return CompiledOpenVino(compiled, streams, threads_per_stream, where)


def run_request(request: Any, outputs: Sequence[str], inputs: Mapping[str, Array]) -> list[np.ndarray]:
    # share_inputs: the request's arrays are read in place (the call is synchronous and the
    # caller does not touch them meanwhile); outputs are copied, since the next infer reuses them.
    result = request.infer(dict(inputs), share_inputs=True, share_outputs=False)
    return [np.asarray(result[name]) for name in outputs]


def probe_apart(probe: bytes, timeout: float) -> list[tuple[float, float]]:
    """Run inferpool.engine.backends.openvino_probe on ``probe`` in a new interpreter that finds
    this one's modules; its answer, or ModelLoadError (it failed, or overran ``timeout``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    command = [sys.executable, "-m", "inferpool.engine.backends.openvino_probe"]
    try:
        done = subprocess.run(command, input=probe, capture_output=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:  # run() killed it
        raise ModelLoadError(f"the openvino wide probe took over {timeout:g} s") from exc
    except OSError as exc:
        raise ModelLoadError(f"the openvino wide probe did not start: {exc}") from exc
    if done.returncode != 0:
        last = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise ModelLoadError(f"the openvino wide probe exited with {done.returncode}: {last[0]}")
    try:
        seconds = json.loads(done.stdout)
    except ValueError as exc:
        raise ModelLoadError(f"the openvino wide probe answered {done.stdout[:80]!r}") from exc
    return [(float(narrow), float(wide)) for narrow, wide in seconds]


def _lane_precision(module: InferenceModule, options: RuntimeOptions) -> str:
    """The precision a wide lane is built in: bf16 only once this tree's verdict says it serves it."""
    return "bf16" if bf16_verdict(module, options, "openvino") == "bf16" else "fp32"


def check_parity(module: InferenceModule, compiled: CompiledOpenVino, tolerance: Tolerance) -> None:
    names = [s.name for s in module.schema.outputs]
    got = run_request(compiled.model.create_infer_request(), names, module.example_inputs)
    want = eager_outputs(module, module.example_inputs)
    wrong = first_mismatch(names, got, want, tolerance)
    if wrong is not None:
        raise ModelLoadError(
            f"openvino's compiled {compiled.source} disagrees with the eager model {module.name!r} on output "
            f"{wrong!r}; use backend 'onnxruntime' or 'eager'"
        )


def streams_for(options: RuntimeOptions) -> int:
    """One stream per runtime: ``num_runtimes`` when fixed, else one until the plan is known
    (``ServedModel.start`` rebuilds for its plan, see ``needs_own_artifact``). One is what the
    supervisor's fork-safe load wants; a model loaded and started in one process with an
    automatic plan of several runtimes is therefore compiled twice at start."""
    return max(1, options.num_runtimes)


class OpenVinoRuntime(Runtime):
    """One infer request on the shared compiled model built by :meth:`compile`."""

    shared = ("compiled model", CompiledOpenVino)
    threaded_artifact = True
    wide_artifact_supported = True
    wide_probe_apart = True
    """A parent that compiled and ran a model of two threads, and dropped it before the fork,
    leaves its children hanging in ``compile_model`` of their own lane (config/minilm.toml's
    serving processes never became ready, seen with a stack dump; reproduced on digits, whose
    child compiled fine while the parent still held the model): the supervisor times the lane
    in a fresh interpreter (``wide_seconds_apart``), and only the forked serving processes
    build it, each its own."""
    wide_precisions = ("fp32", "bf16", "auto")  # int8 serves a quantized file, which wide_artifact does not compile
    tolerance = Tolerance(rtol=1e-3, atol=1e-5)  # fused and reordered float ops, as onnxruntime's

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        super().__init__(module, options, compiled)
        self._inputs = tuple(s.name for s in module.schema.inputs)
        self._outputs = [s.name for s in module.schema.outputs]
        self._request = self.compiled.model.create_infer_request()

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> CompiledOpenVino:
        require()  # before exporting, so that its absence is not taken for a bad export
        model, where, exported = model_file(module, options)
        streams = streams_for(options)
        known_bf16 = bf16_verdict(module, options, "openvino") == "bf16"
        if known_bf16:
            # This tree gated and raced bf16 already (a rebuild for the plan, a forked serving
            # process): the fp32 build and its parity check would only cost 1-3 s of start-up.
            compiled = compile_file(module, model, where, streams, options.intra_op_threads, "bf16")
        else:
            compiled = compile_file(module, model, where, streams, options.intra_op_threads)
            check_parity(module, compiled, cls.tolerance)
        if exported is not None:
            names = [s.name for s in module.schema.outputs]
            compiled = compiled if known_bf16 else serve_precision(
                module, options, "openvino", exported, compiled,
                load=lambda path: compile_file(module, path, str(path), streams, options.intra_op_threads),
                run=lambda served, inputs: run_request(served.model.create_infer_request(), names, inputs),
                bf16=lambda: compile_file(module, model, where, streams, options.intra_op_threads, "bf16"),
            )  # fmt: skip
            _exports[module.module] = exported
            if options.backend == "openvino":  # named, it alone serves: the torch weights are a second copy
                release_into_cache(module, exported, "openvino")
        log.debug("model %r: openvino compiled %s with %d stream(s) x %d thread(s)",
                  module.name, where, compiled.streams, compiled.threads_per_stream)  # fmt: skip
        return compiled

    @classmethod
    def compile_reduced(cls, module: InferenceModule, options: RuntimeOptions, precision: str) -> CompiledOpenVino:
        """The model compiled in ``precision`` only, for ``precision = "auto"``'s candidate
        (inferpool.engine.backends.precision_auto): no fp32 build and no parity check, since the
        accuracy gate judges it against the fp32 winner instead."""
        require()
        model, where, exported = model_file(module, options)
        compiled = compile_file(module, model, where, streams_for(options), options.intra_op_threads, precision)
        if exported is not None:
            _exports[module.module] = exported
        return compiled

    @classmethod
    def wide_artifact(cls, module: InferenceModule, options: RuntimeOptions, threads: int) -> CompiledOpenVino:
        """The served model again as one stream of ``threads`` threads, in the precision this
        process tree serves (bf16 only once its verdict says so), for inferpool.engine.plan.wide's lane."""
        model, where, _ = model_file(module, options)
        served = _lane_precision(module, options)
        return compile_file(module, model, where, 1, threads, served)

    @classmethod
    def wide_seconds_apart(
        cls, module: InferenceModule, options: RuntimeOptions, threads: int, examples: Sequence[Mapping[str, Array]],
        repeats: int, timeout: float,
    ) -> list[tuple[float, float]]:  # fmt: skip
        """The narrow and ``wide_artifact``'s median seconds on each example, timed alternately by
        inferpool.engine.backends.openvino_probe in an interpreter of its own (this process
        compiles and runs nothing threaded)."""
        from inferpool.engine.plan.wide import MIN_SPEEDUP  # the gate the probe may stop at; wide imports backends

        model, _, _ = model_file(module, options)
        served = _lane_precision(module, options)
        probe = {
            "model": str(model) if isinstance(model, Path) else model,
            "config": compile_config(1, threads, served),
            "narrow_config": compile_config(1, 1, served),
            "examples": [{name: np.ascontiguousarray(a) for name, a in example.items()} for example in examples],
            "repeats": repeats,
            "enough": MIN_SPEEDUP,
        }
        started = time.perf_counter()
        seconds = probe_apart(pickle.dumps(probe), timeout)
        log.info("model %r: openvino's wide lane (%d threads, %s) timed apart in %.1f s",
                 module.name, threads, served, time.perf_counter() - started)  # fmt: skip
        return seconds

    @classmethod
    def release_weights(cls, module: InferenceModule) -> None:
        """``auto`` chose this backend: the torch weights leave memory (as when it is named)."""
        exported = _exports.get(module.module)
        if exported is not None:
            release_into_cache(module, exported, "openvino")

    @classmethod
    def needs_own_artifact(cls, compiled: Any, plan: ThreadPlan, *, forked: bool) -> bool:
        """Forked: the parent's compiled model hangs here unless it has one stream of one thread
        (see the module docstring). Either way: one built for another layout than the plan's
        (``compile`` sees ``num_runtimes`` as configured, 0 for automatic) would serialise the
        plan's runtimes on too few streams, or leave threads idle."""
        if not isinstance(compiled, CompiledOpenVino):
            return True
        if forked and (compiled.threads > 1 or plan.threads > 1):
            return True
        return (compiled.streams, compiled.threads_per_stream) != (plan.runtimes, plan.intra_op_threads)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        outputs = run_request(self._request, self._outputs, {name: inputs[name] for name in self._inputs})
        self.calls += 1
        return dict(zip(self._outputs, outputs, strict=True))
