"""ONNX Runtime: the model exported to ONNX once, one InferenceSession shared by every runtime.

``compile`` builds the session once per model (the AOTInductor/Static Runtime split): ORT's
``Run`` is thread-safe and releases the GIL, and each extra session would hold its own copy of
the weights. A runtime keeps only its RunOptions. The export itself is
cached on disk (inferpool.engine.backends.onnxruntime.export): a restart builds the session from the file.

Weights once: when onnxruntime alone serves the model (``backend = "onnxruntime"``, or ``auto``
chose it: ``release_weights``), the torch module's weights are moved into a mapped file
(inferpool.engine.backends.weights) once the eager reference for the parity check is computed and before
the session is built, so the two copies are never resident together. A module so released is
remembered with its checked export and reference: the session a forked process rebuilds for
more intra-op threads (``threaded_artifact``) is built from that file and checked against that
reference, without reading the torch weights again.

Plain ``session.run`` with numpy inputs, not ``run_with_iobinding``: binding costs more Python
calls per request than the copies it saves on tensors as small as a request's (measured slower
with an IOBinding per runtime and with preallocated output buffers; the figures are in
docs/BENCHMARKS.md, "Figures moved from the code").

A call whose callers all stopped waiting is stopped between two operators (``terminate`` on the
call's own RunOptions: inferpool.engine.serving.call_stop).
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.onnxruntime.export import (
    KEY_METADATA,
    OnnxExport,
    Progress,
    ensure_export,
    release_weights,
    require,
)
from inferpool.engine.backends.parity import Tolerance, eager_outputs, first_mismatch
from inferpool.engine.backends.precision import check_source, serve_precision
from inferpool.engine.compile_cache import cache_dir
from inferpool.engine.errors import CallStopped, ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.models.onnx_source import onnx_file_session
from inferpool.engine.models.sources import load_model
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array
from inferpool.engine.serving import call_stop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checked:
    """A module's export that passed the parity check, and the eager outputs it was checked against."""

    exported: OnnxExport
    reference: Sequence[np.ndarray]
    released: bool = False
    """The torch weights were moved out of memory (see inferpool.engine.backends.weights)."""


_checked: weakref.WeakKeyDictionary[torch.nn.Module, Checked] = weakref.WeakKeyDictionary()


def checked(module: InferenceModule) -> Checked | None:
    """The last export of ``module`` that passed the parity check in this process, if any."""
    return _checked.get(module.module)


def session_options(options: RuntimeOptions) -> Any:
    """Serving options. ORT_ENABLE_ALL because its layout transforms matter on convolutions
    (the digits CNN runs markedly faster than at BASIC or EXTENDED); on MiniLM the levels are
    within noise. The memory arena and memory patterns stay on: turning either off changed
    neither speed nor RSS measurably on MiniLM or digits (cleanup_activations shrinks the arena
    after each run instead). Weight prepacking stays on: without it MiniLM is much slower.
    Figures: docs/BENCHMARKS.md, "Figures moved from the code"."""
    ort = require("onnxruntime")
    so = ort.SessionOptions()
    # The thread plan's per-runtime count. One creates no ORT thread, so a session built in a
    # parent keeps working in forked children; with more, the session's pool threads stay in
    # the parent and a child's runs (still correct: unclaimed work runs on the caller) use one.
    so.intra_op_num_threads = options.intra_op_threads
    # Requests already run in parallel on the runtimes; inter-op parallelism would only
    # add threads competing for the same cores (as in inferpool.engine.plan.threads for torch).
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return so


def check_parity(module: InferenceModule, session: Any, reference: Sequence[np.ndarray] | None = None) -> None:
    """Run the example inputs through ORT and compare with eager's outputs on them
    (``reference``, computed now if None): a model that exported into something else (a
    silently specialised shape, a wrong op) fails at load, not in traffic."""
    names = [s.name for s in module.schema.outputs]
    got = session.run(names, dict(module.example_inputs))
    want = eager_outputs(module, module.example_inputs) if reference is None else reference
    wrong = first_mismatch(names, got, want, OnnxRuntime.tolerance)
    if wrong is not None:
        raise ModelLoadError(
            f"the ONNX export of {module.name!r} disagrees with the eager model on output {wrong!r}; "
            "use backend 'eager'"
        )


def _checked_session(
    module: InferenceModule, options: RuntimeOptions, exported: OnnxExport, reference: Sequence[np.ndarray]
) -> Any:
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
    check_parity(module, session, reference)
    return session


def _plain_session(module: InferenceModule, options: RuntimeOptions, path: Path) -> Any:
    """A session on a derived file (the int8 one), which the accuracy gate checks instead of parity."""
    try:
        return require("onnxruntime").InferenceSession(
            str(path), session_options(options), providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ModelLoadError(f"onnxruntime cannot load {path} for {module.name!r}: {exc}") from exc


def _release(module: InferenceModule, exported: OnnxExport) -> bool:
    return release_weights(module, exported, "onnxruntime")


def _cached_in(exported: OnnxExport, options: RuntimeOptions) -> bool:
    """The export is the one a start with ``options`` would find (not another cache's)."""
    return isinstance(exported.model, Path) and exported.model.parent == cache_dir(options.compile_cache_dir)


def _rebuilt_session(module: InferenceModule, options: RuntimeOptions, known: Checked) -> Any | None:
    try:
        return _checked_session(module, options, known.exported, known.reference)
    except ModelLoadError as exc:  # the file changed since it was checked: the full path below
        log.warning("the checked ONNX export of %r no longer loads as checked: %s", module.name, exc)
        return None


def load_session(
    module: InferenceModule, options: RuntimeOptions, progress: Progress = log.debug, *, release: bool = False
) -> tuple[Any, OnnxExport]:
    """The model's session, checked against eager, from its cached export or a new one. A cached
    file that does not load, is not what its name says or disagrees with eager is exported
    again (with a warning naming it): a cache must never be a reason not to start. ``release``:
    onnxruntime alone will serve the model, so its torch weights leave memory before the session
    is built (see the module docstring)."""
    require("onnxruntime")  # before exporting, and so that its absence is not taken for a bad file
    known = checked(module)
    if known is not None and known.released and _cached_in(known.exported, options):
        session = _rebuilt_session(module, options, known)
        if session is not None:
            return session, replace(known.exported, export_seconds=None)  # from the cache this time
    exported = ensure_export(module, options, progress)
    reference = eager_outputs(module, module.example_inputs)  # while the weights are in memory anyway
    released = (known is not None and known.released) or (release and _release(module, exported))
    try:
        session = _checked_session(module, options, exported, reference)
    except ModelLoadError as exc:
        if exported.export_seconds is not None:
            raise  # exported just now: the model itself does not survive the export
        log.warning("the cached ONNX export %s is unusable, exporting %r again: %s", exported.model, module.name, exc)
        exported = ensure_export(module, options, progress, rebuild=True)
        session = _checked_session(module, options, exported, reference)
    _checked[module.module] = Checked(exported, reference, released)
    return session, exported


def compile_model(source: str, options: RuntimeOptions, progress: Progress = log.info) -> OnnxExport:
    """``inferpool compile``: load the model from ``source`` and make sure its ONNX export is
    cached and loads with the eager model's answers."""
    progress(f"loading {source}")
    return load_session(InferenceModule.from_spec(load_model(source)), options, progress)[1]


class OnnxRuntime(Runtime):
    """Runs the shared ``onnxruntime.InferenceSession`` built by :meth:`compile`."""

    shared = ("session", object)
    threaded_artifact = True
    wide_artifact_supported = True
    tolerance = Tolerance(rtol=1e-3, atol=1e-5)  # ORT fuses and reorders float ops

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        super().__init__(module, options, compiled)
        self._inputs = tuple(s.name for s in module.schema.inputs)
        self._outputs = [s.name for s in module.schema.outputs]
        # onnxruntime hands int64 out as numpy.longlong (the same bits), which orjson does not take
        # for int64: one fallback call a request answered in JSON (the digits label), against a
        # view's 0.2 µs here.
        self._int64_at = [at for at, s in enumerate(module.schema.outputs) if s.dtype == "int64"]
        # Return the arena's free chunks after a run: a large batch otherwise keeps its
        # activations resident for the life of the process (docs/BENCHMARKS.md, issue 17). Only a
        # run of more than one row can grow the arena past what every one-row call needs again,
        # so only such a run shrinks it: shrinking costs ~1 µs a call, 7 % of a digits call
        # (sixteenth session).
        self._ort = require("onnxruntime")
        # The session's own C++ run, past the Python wrapper's checks on every call (graph capture,
        # the feed's names, OrtValue ownership: 1-3 µs of a digits call's ~14): the feed is built from
        # the schema's input names, which the session was checked to have at load, and the C++ run
        # checks the feed again anyway. Any other kind of artifact (bf16's) keeps its own run.
        inner = getattr(compiled, "_sess", None) if isinstance(compiled, self._ort.InferenceSession) else None
        self._session_run = compiled.run if inner is None else inner.run
        self._cleanup = options.cleanup_activations
        self._run_options = self._options(shrinking=False)
        self._shrinking = self._options(shrinking=True)

    def _options(self, *, shrinking: bool) -> Any:
        options = self._ort.RunOptions()
        if shrinking and self._cleanup:
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        return options

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> Any:
        check_source(module, options)
        served = onnx_file_session(module, session_options(options))  # an ONNX file serves itself
        if served is not None:
            return served
        # Named, it alone will serve the module; under ``auto`` the weights stay until it is chosen.
        session, exported = load_session(module, options, release=options.backend == "onnxruntime")
        names = [s.name for s in module.schema.outputs]
        return serve_precision(
            module, options, "onnxruntime", exported, session,
            load=lambda path: _plain_session(module, options, path),
            run=lambda served, inputs: served.run(names, dict(inputs)),
        )  # fmt: skip

    @classmethod
    def wide_artifact(cls, module: InferenceModule, options: RuntimeOptions, threads: int) -> Any:
        """A second session on the same checked export for ``threads`` intra-op threads, whose pool
        threads stop spinning as soon as its run returns: it serves only a call running alone
        (inferpool.engine.plan.wide), and a pool still spinning after it would take the cores the narrow
        runtimes need once others arrive. They spin within a run: ResNet-50 on 2 threads, one call
        every 2-20 ms, took 31.6 ms a call against 32.6 with spinning off, at the same 1.2 cores
        between calls (docs/BENCHMARKS.md, fifteenth session)."""
        so = session_options(replace(options, intra_op_threads=threads))
        so.add_session_config_entry("session.force_spinning_stop", "1")
        served = onnx_file_session(module, so)
        if served is not None:
            return served
        known = checked(module)
        if known is None:  # not loaded through load_session in this process: export and check now
            return load_session(module, replace(options, intra_op_threads=threads))[0]
        ort = require("onnxruntime")
        model = str(known.exported.model) if isinstance(known.exported.model, Path) else known.exported.model
        session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        check_parity(module, session, known.reference)
        return session

    @classmethod
    def release_weights(cls, module: InferenceModule) -> None:
        """``auto`` chose this backend: nothing but the session runs the model any more, so the
        torch weights leave memory (the one session ``compile`` built and checked stays)."""
        known = checked(module)
        if known is not None and not known.released and _release(module, known.exported):
            _checked[module.module] = Checked(known.exported, known.reference, released=True)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        arrays = {name: inputs[name] for name in self._inputs}
        first = arrays[self._inputs[0]] if self._inputs else None
        batched = first is not None and first.ndim > 0 and first.shape[0] > 1
        options = self._shrinking if batched else self._run_options
        stop = call_stop.take()
        if stop is not None:
            # Options of this call's own (0.3 µs): a stop that comes as it ends reaches no other call.
            options = self._options(shrinking=batched)
            stop.arm(functools.partial(setattr, options, "terminate", True))
        try:
            outputs = self._session_run(self._outputs, arrays, options)
        except Exception:
            if stop is not None and options.terminate:  # between two operators, as asked
                raise CallStopped("every caller of this call stopped waiting") from None
            raise
        self.calls += 1
        for at in self._int64_at:
            outputs[at] = outputs[at].view(np.int64)
        return dict(zip(self._outputs, outputs, strict=True))
