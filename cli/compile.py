"""``inferpool compile [--config FILE] [--model SRC] [--prepare aoti|onnxruntime] [--runtime.X ...]``

Prepares the compile cache that ``inferpool serve`` reads, so that serving starts without
compiling: AOTInductor packages (``--runtime.backend aoti``) and ONNX exports (``onnxruntime``).
What it prepares follows the configured backend (see :func:`artifacts`), or ``--prepare``.
It takes exactly the settings ``serve`` takes (same config file, flags and environment), because
the cache keys cover the options that shape the artifacts: compile and serve with the same ones.
It sizes the processes and plans each model's threads as ``serve`` does (refusing the same
budgets), and builds and checks every artifact under the threads ``serve`` loads with
(inferpool.engine.plan.threads.apply_loading_plan), so that serving finds exactly what was built here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from inferpool.cli.argv import config_argument, planned, settings_from_argv
from inferpool.engine import ConfigError, ModelLoadError
from inferpool.engine.compile_cache import cache_dir
from inferpool.engine.models.sources import required_backend
from inferpool.engine.options import AUTO_CANDIDATES, RuntimeOptions
from inferpool.engine.plan.threads import apply_loading_plan
from inferpool.service.models.host import plans, settings_shares

AOTI, ONNX = "aoti", "onnxruntime"
ONNX_READERS = (ONNX, "openvino")
"""Backends that serve the ONNX export (openvino compiles the file onnxruntime's export caches)."""
Progress = Callable[[str], None]


def artifacts(options: RuntimeOptions) -> tuple[str, ...]:
    """What serving with ``options`` reads from the cache: the ONNX export for ``onnxruntime`` and
    ``openvino``, and for ``auto`` when one is a candidate (onnxruntime is by default); AOTInductor packages for
    ``aoti`` or an ``auto`` that lists it. Any other backend caches nothing, so it gets the
    AOTInductor packages, to serve with ``--runtime.backend aoti`` (what compile always did)."""
    if options.backend == "auto":
        candidates = options.auto_backends or AUTO_CANDIDATES
        onnx = (ONNX,) if any(name in candidates for name in ONNX_READERS) else ()
        return onnx + ((AOTI,) if AOTI in candidates else ())
    return (ONNX,) if options.backend in ONNX_READERS else (AOTI,)


def _aoti(source: str, options: RuntimeOptions, progress: Progress) -> None:
    from inferpool.engine.backends.aoti.compile import compile_model

    packages = compile_model(source, replace(options, backend=AOTI), progress)
    fresh = sum(p.compile_seconds is not None for p in packages)
    progress(f"{source}: {len(packages)} package(s), {fresh} compiled now, {len(packages) - fresh} cached")


def _onnx(source: str, options: RuntimeOptions, progress: Progress) -> None:
    from inferpool.engine.backends.onnxruntime.runtime import compile_model

    exported = compile_model(source, options, progress)
    how = "from the cache" if exported.export_seconds is None else "exported now"
    progress(f"{source}: ONNX export {how} and checked against eager in onnxruntime")


PREPARE: dict[str, Callable[[str, RuntimeOptions, Progress], None]] = {AOTI: _aoti, ONNX: _onnx}


def compile_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="inferpool compile",
        description="Prepare the compile cache for the configured models: AOTInductor packages and/or ONNX "
        "exports, as the configured backend reads them. Takes the settings `inferpool serve` takes (see "
        "`inferpool serve --help`); serve with the same ones.",
    )
    config_argument(parser)
    parser.add_argument(
        "--prepare",
        action="append",
        choices=sorted(PREPARE),
        help="what to prepare (repeatable); default: what the configured backend reads (auto: onnxruntime, "
        "and aoti when auto_backends lists it; any other backend but onnxruntime: aoti)",
    )
    args, rest = parser.parse_known_args(argv)
    settings = settings_from_argv("inferpool compile", args, rest, planned)
    if isinstance(settings, int):
        return settings
    models = plans(settings)
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    directories: set[Path] = set()
    prepared: set[str] = set()
    for model in models:
        kinds = tuple(args.prepare or artifacts(model.options))
        if required_backend(model.source) is not None:  # an ONNX file: no torch module to compile
            progress(f"{model.source}: nothing to prepare, it is served as it is")
            continue
        if not kinds:
            progress(f"{model.source}: its backends read nothing from the cache; name one with --prepare")
        try:
            # As serve loads: in the supervisor, before it forks the serving processes.
            apply_loading_plan(model.options, settings_shares(settings), forks=True)
            for kind in kinds:
                PREPARE[kind](model.source, model.options, progress)
        except (ModelLoadError, ConfigError) as exc:
            print(f"inferpool compile: {exc}", file=sys.stderr)
            return 1
        prepared.update(kinds)
        directories.add(cache_dir(model.options.compile_cache_dir))
    serve = ["inferpool", "serve", *([f"--config={args.config}"] if args.config else []), *rest]
    print(f"the cache is in {', '.join(map(str, sorted(directories)))}")
    if prepared == {AOTI}:
        serve += ["--runtime.backend", AOTI]  # the settings may name a backend that reads no package
    print(f"serve with: {shlex.join(serve)}")
    return 0
