"""Export a model at fixed batch sizes and compile each to an AOTInductor ``.pt2`` package,
cached by content hash (inferpool.engine.compile_cache) so that a restart finds it instead of recompiling.

AOTInductor packages have static shapes here: one package per compiled batch size, each
exported with that batch baked in (inferpool.engine.backends.aoti routes requests to them). The cache
key covers the exported graph and every weight's bytes, the batch size, the interface and its
inductor configs, torch's intra-op thread count at compile time (Inductor generates OpenMP
regions for it: none for one thread, so a package built for more would run a thread team in a
process that serve forks after loading, see inferpool.engine.plan.threads.apply_loading_plan) and the machine
(torch version, ISA): change any and the key changes.
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from inferpool.engine.backends import AotiInterface
from inferpool.engine.compile_cache import cache_dir, content_key, tensor_parts, write_atomically
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.models.sources import load_model
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import TensorSpec

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# Freezing is off, although the issue asked for it: it lowers linear/conv to mkldnn's
# pointwise kernels, which made every call slower on the MLP and the digits CNN, with or without
# weight prepacking (figures in docs/BENCHMARKS.md, "Freezing"; the script that measured them,
# loadtest/bench_aoti_freezing.py, was removed with the question settled: git log -- that path).
# The minimal ArrayRef interface needs BOTH of its flags: codegen/common.py picks the ArrayRef
# wrapper (CppWrapperCpuArrayRef, which emits the V2 entry point) only when
# allow_stack_allocation is set; with use_minimal_arrayref_interface alone the wrapper is unchanged.
INDUCTOR_CONFIGS: dict[str, dict[str, object]] = {
    AotiInterface.MINIMAL_ARRAYREF: {
        "freezing": False,
        "aot_inductor.use_minimal_arrayref_interface": True,
        "aot_inductor.allow_stack_allocation": True,
    },
    AotiInterface.LOADER: {"freezing": False},
}


@dataclass(frozen=True)
class Package:
    """One compiled batch size: where its package is and whether this call compiled it."""

    batch_size: int
    path: Path
    compile_seconds: float | None = None
    """Seconds spent compiling it now; None when it came from the cache."""


def compiled_batch_sizes(options: RuntimeOptions) -> tuple[int, ...]:
    sizes = options.compiled_batch_sizes or (1, options.largest_batch, *options.preferred_batch_sizes)
    return tuple(sorted(set(sizes)))


def check_static(module: InferenceModule) -> None:
    """Fixed-shape packages need a batch dimension and no other dynamic dimension."""
    for spec in module.schema.inputs + module.schema.outputs:
        if not spec.batched:
            raise ModelLoadError(
                f"backend 'aoti' compiles {module.name!r} per batch size, but {spec.name!r} has no batch "
                "dimension; use backend 'eager' or 'onnxruntime'"
            )
        if None in spec.sample_shape:
            raise ModelLoadError(
                f"backend 'aoti' compiles static shapes, but {spec.name!r} of {module.name!r} has a dynamic "
                f"non-batch dimension {spec.describe()} (e.g. a sequence length); use backend 'eager' or "
                "'onnxruntime' for this model"
            )


def static_shape(spec: TensorSpec, batch: int) -> tuple[int, ...]:
    """``spec``'s shape at ``batch`` rows (check_static has ruled out other dynamic dims)."""
    return (batch, *(d for d in spec.sample_shape if d is not None))


def export_at(module: InferenceModule, batch: int) -> torch.export.ExportedProgram:
    args = tuple(torch.from_numpy(a) for a in module.examples(batch).values())
    try:
        return torch.export.export(module.module, args)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot torch.export {module.name!r} at batch {batch}: {exc}; use backend 'eager'"
        ) from exc


def program_key(program: torch.export.ExportedProgram, batch: int, interface: str) -> str:
    configs = sorted(INDUCTOR_CONFIGS[interface].items())
    threads = f"threads={torch.get_num_threads()}"  # what compile_package, next, generates code for
    return content_key([str(program.graph), str(batch), interface, repr(configs), threads, *tensor_parts(program)])


def package_path(directory: Path, name: str, batch: int, key: str) -> Path:
    return directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-b{batch}-{key}.pt2"


def compile_package(program: torch.export.ExportedProgram, path: Path, *, interface: str) -> None:
    """The expensive step (tens of seconds): inductor codegen and a C++ compile."""
    with torch.no_grad(), warnings.catch_warnings():
        # torch 2.13's own unfrozen AOT path trips its own pytree deprecation; nothing to act on.
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=FutureWarning)
        torch._inductor.aoti_compile_and_package(
            program, package_path=str(path), inductor_configs=dict(INDUCTOR_CONFIGS[interface])
        )


def ensure_packages(module: InferenceModule, options: RuntimeOptions, progress: Progress = log.info) -> list[Package]:
    """A package per compiled batch size: from the cache, or compiled now and cached."""
    check_static(module)
    directory = cache_dir(options.compile_cache_dir)
    interface = options.aoti_interface
    packages = []
    for batch in compiled_batch_sizes(options):
        program = export_at(module, batch)
        path = package_path(directory, module.name, batch, program_key(program, batch, interface))
        if path.is_file():
            progress(f"{module.name!r} batch {batch}: cached {path}")
            packages.append(Package(batch, path))
            continue
        progress(f"{module.name!r} batch {batch}: compiling with AOTInductor ({interface}); takes tens of seconds ...")
        started = time.perf_counter()
        try:
            write_atomically(path, partial(compile_package, program, interface=interface))
        except Exception as exc:
            raise ModelLoadError(
                f"AOTInductor cannot compile {module.name!r} at batch {batch}: {exc}; use backend 'eager' or "
                "'onnxruntime'"
            ) from exc
        seconds = time.perf_counter() - started
        progress(f"{module.name!r} batch {batch}: compiled in {seconds:.1f} s -> {path}")
        packages.append(Package(batch, path, seconds))
    return packages


def compile_model(source: str, options: RuntimeOptions, progress: Progress = log.info) -> list[Package]:
    """``inferpool compile``: load the model from ``source`` and make sure its packages exist."""
    progress(f"loading {source}")
    return ensure_packages(InferenceModule.from_spec(load_model(source)), options, progress)
