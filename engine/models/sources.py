"""Model sources: where an InferenceModule's model comes from, picked by the source string.

- ``package.module:function`` -- a Python factory returning a :class:`ModelSpec`.
- ``path/to/model.pt2`` -- an archive written by ``torch.export.save``.
- ``path/to/model.ts`` (or ``.torchscript``) -- a legacy ``torch.jit.save`` archive, with a
  description of its inputs (see inferpool.engine.models.torchscript_archive).
- ``path/to/model.onnx`` -- an ONNX model, which only the onnxruntime backend serves (see
  inferpool.engine.models.onnx_source).
- ``path/to/folder`` -- a Hugging Face encoder folder (embedder, cross-encoder or classifier),
  served with its own handler (see inferpool.engine.models.text).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from inferpool.engine.errors import ConfigError, ModelLoadError
from inferpool.engine.models.onnx_source import load_onnx
from inferpool.engine.models.source_kinds import kind_of
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.models.torchscript_archive import load_torchscript
from inferpool.engine.options import RuntimeOptions


def import_object(ref: str, what: str, form: str = "package.module:function") -> Any:
    """The object a ``package.module:attr`` reference names; ModelLoadError saying what to fix."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ModelLoadError(f"{what} {ref!r} must look like '{form}'")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(f"cannot import {what} {ref!r}: {exc}{_import_hint(exc)}") from exc


# InferPool's packages before they moved under the one import name `inferpool`.
OLD_TOP_LEVEL = frozenset({"engine", "service", "config", "cli", "harness"})


def _import_hint(exc: Exception) -> str:
    """What to change when the module is missing: a pre-`inferpool.` name, or a folder not on the path."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return ""
    top = exc.name.partition(".")[0]
    if top in OLD_TOP_LEVEL:
        return (
            f"; InferPool's modules are all under 'inferpool.': write 'inferpool.{exc.name}' "
            f"(e.g. 'from inferpool.engine import ModelSpec'), see the README's 'Serving your own model'"
        )
    return (
        f"; {top!r} is looked up in the app dir (--app-dir, default: the current directory) and the installed packages"
    )


def load_factory(source: str) -> ModelSpec:
    spec = import_object(source, "model factory")()
    if not isinstance(spec, ModelSpec):
        raise ModelLoadError(f"model factory {source!r} returned {type(spec).__name__}, not inferpool.engine.ModelSpec")
    return spec


def load_export(source: str) -> ModelSpec:
    path = Path(source)
    if not path.is_file():
        raise ModelLoadError(f"torch.export archive {source!r} does not exist; give the path of a .pt2 file")
    try:
        program = torch.export.load(path)
    except Exception as exc:
        raise ModelLoadError(f"cannot load torch.export archive {source!r}: {exc}") from exc
    names = program.graph_signature.user_inputs
    placeholders = {n.name: n.meta["val"] for n in program.graph.nodes if n.op == "placeholder"}
    examples = {
        name: torch.zeros([_example_dim(program, d) for d in placeholders[name].shape], dtype=placeholders[name].dtype)
        for name in names
    }
    batched = all(isinstance(placeholders[n].shape[0], torch.SymInt) for n in names if placeholders[n].dim())
    return ModelSpec(
        module=program.module(),
        example_inputs=examples,
        output_names=tuple(str(n) for n in program.graph_signature.user_outputs),
        name=path.stem,
        batched=batched,
    )


def _example_dim(program: torch.export.ExportedProgram, dim: int | torch.SymInt) -> int:
    if isinstance(dim, int):
        return dim
    # torch.export specialises sizes 0 and 1, so 2 is the smallest safe example size.
    bounds = program.range_constraints.get(dim.node.expr)
    return max(2, int(bounds.lower)) if bounds is not None else 2


def load_folder(source: str) -> ModelSpec:
    from inferpool.engine.models.text.loading import load_folder as load  # transformers: only for a folder

    return load(source)


SOURCES: dict[str, Callable[[str], ModelSpec]] = {
    "export": load_export,
    "folder": load_folder,
    "torchscript": load_torchscript,
    "onnx": load_onnx,
    "factory": load_factory,
}
SOURCE_BACKENDS = {"onnx": ("onnxruntime", "openvino")}
"""Source kinds only some backends serve, the first under ``auto``: an ONNX file has no torch
module to compile or time."""


def source_kind(source: str) -> str:
    """Which SOURCES entry loads ``source`` (source_kinds.kind_of)."""
    return kind_of(source)


def load_model(source: str) -> ModelSpec:
    return SOURCES[source_kind(source)](source)


def required_backend(source: str) -> str | None:
    """The backend that serves ``source`` under ``auto``, if only some do."""
    allowed = SOURCE_BACKENDS.get(source_kind(source))
    return allowed[0] if allowed else None


def allowed_backends(source: str) -> tuple[str, ...] | None:
    """The backends that can serve ``source``, or None when any can."""
    return SOURCE_BACKENDS.get(source_kind(source))


def serving_options(source: str, options: RuntimeOptions) -> RuntimeOptions:
    """``options`` for the model from ``source``: a source only some backends serve gets the
    first in place of ``auto``; ConfigError when ``options`` name another."""
    allowed = allowed_backends(source)
    if allowed is None or options.backend in allowed:
        return options
    if options.backend != "auto":
        raise ConfigError(
            f"{source!r} is served by backend {' or '.join(map(repr, allowed))} only, not {options.backend!r}: set "
            f"runtime.backend to one of them (or 'auto' for {allowed[0]!r}) for it"
        )
    return dataclasses.replace(options, backend=allowed[0])
