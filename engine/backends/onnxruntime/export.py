"""Export a model to ONNX once, cached by content hash (inferpool.engine.compile_cache), so that a restart
loads the file instead of exporting again (the export is most of onnxruntime's start; building
a session from the file is a small part of it).

The cache key covers what defines the model without exporting it (its module classes' source,
its weights and buffers, its schema; see ``source_key``), the exporter's options, the versions
of torch, onnx, onnxscript and onnxruntime, and the machine; for a model whose code cannot be
read, the ``torch.export`` graph instead (as for the AOTInductor packages). A warm start
therefore neither exports nor traces; the parity check against eager still runs. The key is
also written into the file's metadata, so that a file renamed or copied under another key is
noticed, not served.

The weights go into a second file beside it (``<file>.<hash>.data``, ONNX external data, each tensor at
a page boundary), which onnxruntime maps instead of copying: a session built from one
self-contained file holds the weights twice over while the library parses the protobuf, and
more after it; from external data it holds less, with no peak (only the packed matrices are
copied; what the graph reads row by row, as the embedding table, stays on disk until read).
Figures: docs/BENCHMARKS.md, "Figures moved from the code".
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferpool.engine.backends import unfaulted
from inferpool.engine.backends.weights import map_weights
from inferpool.engine.compile_cache import (
    artifact_path,
    cache_dir,
    content_key,
    named_value_parts,
    tensor_parts,
    write_atomically,
)
from inferpool.engine.errors import ModelLoadError, import_optional
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array, TensorSpec

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
INSTALL_HINT = "pip install 'inferpool[onnx]'"
SUFFIX = ".onnx"
WEIGHTS_SUFFIX = ".weights.pt"
KEY_METADATA = "inferpool.cache_key"
OPTIMIZE = True
"""``torch.onnx.export(optimize=...)``, part of the key: it folds the shape arithmetic the
exporter emits around Reshape. Change it (or the call) and bump EXPORTER, and old files are
not read."""
EXPORTER = "torch.onnx.export dynamo=True"
EXTERNAL_MIN_BYTES = 1024  # onnx's own threshold: smaller tensors stay inline
ALIGN = 4096  # a page: each external tensor maps on its own pages
LAYOUT = f"external data >= {EXTERNAL_MIN_BYTES} B aligned to {ALIGN}"
"""How the file is laid out, part of the key: a file of another layout is not read."""
VERSIONED = ("onnx", "onnxscript", "onnxruntime")  # torch is in the machine fingerprint
# The exporter logs a warning for each torchvision op it cannot register when torchvision is
# absent; those ops are irrelevant unless the model uses them (then the export fails loudly).
_EXPORTER_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"


def require(package: str) -> Any:
    return import_optional(package, "backend 'onnxruntime'", f"{INSTALL_HINT}, or use backend 'eager'")


@dataclass(frozen=True)
class OnnxExport:
    """The model's ONNX file in the cache, or its bytes when the cache cannot be written."""

    model: Path | bytes
    key: str
    export_seconds: float | None = None
    """Seconds spent exporting it now; None when it came from the cache."""

    def describe(self) -> str:
        return str(self.model) if isinstance(self.model, Path) else "the in-memory export"


def release_weights(module: InferenceModule, exported: OnnxExport, backend: str) -> bool:
    """Move the torch weights of a model ``backend`` alone serves from ``exported`` out of memory,
    into a mapped file beside the export (inferpool.engine.backends.weights)."""
    if not isinstance(exported.model, Path):
        return False  # an unwritable cache: no file to move the weights into
    released = map_weights(module.module, exported.model.with_suffix(WEIGHTS_SUFFIX))
    if released:
        log.info("model %r: torch weights moved out of memory; %s serves it", module.name, backend)
    return released


@contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's internal deprecation chatter and registry logging: nothing in
    it is actionable for whoever serves the model, and real export problems raise. Not
    thread-safe (warnings filters are global), which is fine: export runs once, at load."""
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


def export_program(module: InferenceModule) -> torch.export.ExportedProgram:
    """``torch.export`` with every schema dimension marked None dynamic: the key's graph and
    the exporter's input (slow: the bulk of a warm start that needs it)."""
    schema = module.schema
    examples = tuple(_export_example(s, module.example_inputs[s.name]) for s in schema.inputs)
    dynamic = tuple(
        {i: torch.export.Dim.DYNAMIC for i, d in enumerate(s.shape) if d is None} or None for s in schema.inputs
    )
    try:
        with _quiet_exporter():
            return torch.export.export(module.module, examples, dynamic_shapes=dynamic)
    except Exception as exc:
        raise ModelLoadError(f"cannot export model {module.name!r} to ONNX: {exc}; use backend 'eager'") from exc


def _versions() -> str:
    def one(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "absent"

    return " ".join(f"{package}={one(package)}" for package in VERSIONED)


def export_key(module: InferenceModule, program: torch.export.ExportedProgram) -> str:
    """The key from the exported graph: for models whose code cannot be read (see source_key)."""
    names = [s.name for s in module.schema.inputs + module.schema.outputs]  # the file's input/output names
    parts = [str(program.graph), EXPORTER, f"optimize={OPTIMIZE}", LAYOUT, repr(names), _versions()]
    return content_key([*parts, *tensor_parts(program)])


def _class_source(kind: type) -> str:
    return inspect.getsource(kind)


def source_key(module: InferenceModule) -> str | None:
    """The key from what defines the model without exporting it: the source of every module
    class in it (or the generated code of a graph module), its weights and buffers, its schema,
    the exporter and the versions. ``torch.export`` alone costs seconds and a lot of memory on
    a model the size of MiniLM (docs/BENCHMARKS.md, issue 22), so a warm start that needed the
    graph for its key could never be quick. What this key cannot
    see (a helper function the forward calls, changed in place) the parity check against eager,
    run on every start, catches on the example inputs. None when some class's source is not
    available (then the exported graph is the key)."""
    code = []
    classes: dict[type, str] = {}  # a ResNet-50 has 191 modules of 6 classes: each parse took ~15 ms
    for sub in module.module.modules():
        kind = type(sub)
        generated = getattr(sub, "code", None)  # torch.fx.GraphModule: its code is generated
        try:
            if isinstance(generated, str):
                text = generated
            elif (text := classes.get(kind, "")) == "":
                text = classes[kind] = _class_source(kind)
        except (OSError, TypeError):
            return None
        code.append(f"{kind.__module__}.{kind.__qualname__}\n{text}")
    specs = [repr(spec) for spec in module.schema.inputs + module.schema.outputs]
    parts = ["source", EXPORTER, f"optimize={OPTIMIZE}", LAYOUT, *specs, _versions(), *code]
    values = module.module.state_dict()
    try:  # weights mapped from a file are read from it, not faulted in (inferpool.engine.backends.unfaulted)
        return unfaulted.content_key([*parts, *unfaulted.value_parts(values)])
    except OSError:
        return content_key([*parts, *named_value_parts(values)])


def to_onnx(module: InferenceModule, program: torch.export.ExportedProgram, key: str) -> Any:
    """The program as an ONNX ModelProto, its key in the metadata."""
    require("onnxscript")  # the dynamo exporter's op library; torch imports it lazily
    schema = module.schema
    try:
        with _quiet_exporter():
            onnx_program = torch.onnx.export(
                program,
                (),
                input_names=[s.name for s in schema.inputs],
                output_names=[s.name for s in schema.outputs],
                dynamo=True,
                optimize=OPTIMIZE,
                verbose=False,
            )
        if onnx_program is None:
            raise RuntimeError("torch.onnx.export returned no program")
        proto = onnx_program.model_proto
        entry = proto.metadata_props.add()
        entry.key, entry.value = KEY_METADATA, key
    except Exception as exc:
        raise ModelLoadError(f"cannot export model {module.name!r} to ONNX: {exc}; use backend 'eager'") from exc
    return proto


def _large_initializers(proto: Any) -> list[Any]:
    return [t for t in proto.graph.initializer if t.HasField("raw_data") and len(t.raw_data) >= EXTERNAL_MIN_BYTES]


def _write_data(tensors: list[Any], extents: list[tuple[int, int]], path: Path) -> Path:
    """The tensors' bytes in a file beside ``path`` named by their hash: two starts exporting one
    key at once each keep the data their model file points at, even if the exports differ."""
    digest = hashlib.sha256()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with temporary.open("wb") as file:
            for tensor in tensors:
                file.seek(-file.tell() % ALIGN, 1)  # a hole, not written zeros
                data = tensor.raw_data
                extents.append((file.tell(), len(data)))
                file.write(data)
                digest.update(data)
            file.truncate()  # a trailing hole must still be part of the file
        final = path.with_name(f"{path.name}.{digest.hexdigest()[:16]}.data")
        os.replace(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)
    return final


def _point_at(tensors: list[Any], extents: list[tuple[int, int]], location: str) -> None:
    external = require("onnx").TensorProto.EXTERNAL
    for tensor, (offset, length) in zip(tensors, extents, strict=True):
        tensor.ClearField("raw_data")
        tensor.data_location = external
        del tensor.external_data[:]
        for name, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = name, value


def _write(proto: Any, path: Path) -> None:
    """The model file and its external data file (written first: a model file in the cache
    always has its data). A model file left without its data (deleted by hand) fails to load
    and is exported again, as any unusable cached file is; data files of replaced exports stay
    behind, as the cache's other files do."""
    tensors = _large_initializers(proto)
    extents: list[tuple[int, int]] = []
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _write_data(tensors, extents, path)
    _point_at(tensors, extents, data.name)
    try:
        write_atomically(path, partial(_write_proto, proto))
    except OSError:
        _inline(tensors, extents, data)  # the in-memory fallback needs the bytes back
        raise


def _write_proto(proto: Any, path: Path) -> None:
    path.write_bytes(proto.SerializeToString())


def _inline(tensors: list[Any], extents: list[tuple[int, int]], path: Path) -> None:
    default = require("onnx").TensorProto.DEFAULT
    with path.open("rb") as file:
        for tensor, (offset, length) in zip(tensors, extents, strict=True):
            file.seek(offset)
            tensor.raw_data = file.read(length)
            tensor.data_location = default
            del tensor.external_data[:]


def ensure_export(
    module: InferenceModule, options: RuntimeOptions, progress: Progress = log.debug, *, rebuild: bool = False
) -> OnnxExport:
    """The model's ONNX file: from the cache, or exported now and cached (``rebuild``: exported
    even if a file is there, which is then replaced)."""
    key, program = source_key(module), None
    if key is None:
        program = export_program(module)
        key = export_key(module, program)
    path = artifact_path(cache_dir(options.compile_cache_dir), module.name, key, SUFFIX)
    if path.is_file() and not rebuild:
        progress(f"{module.name!r}: cached ONNX export {path}")
        return OnnxExport(path, key)
    program = program or export_program(module)
    progress(f"{module.name!r}: exporting to ONNX ...")
    started = time.perf_counter()
    proto = to_onnx(module, program, key)
    seconds = time.perf_counter() - started
    try:
        _write(proto, path)
    except OSError as exc:
        # A read-only cache costs the next start an export; it must not stop this one. Models
        # over protobuf's 2 GB limit do not fit in one serialised model this way.
        log.warning("cannot cache the ONNX export of %r in %s (%s); serving it from memory", module.name, path, exc)
        return OnnxExport(proto.SerializeToString(), key, seconds)
    progress(f"{module.name!r}: exported to ONNX in {seconds:.1f} s -> {path}")
    return OnnxExport(path, key, seconds)
