"""``inferpool compile [--config FILE] [--model SRC] [--runtime.compiled-batch-sizes '[1,8]'] ...``

Compiles every configured model with AOTInductor ahead of time, into the cache that
``inferpool serve --runtime.backend aoti`` reads, so that serving starts without compiling.
It takes exactly the settings ``serve`` takes (same config file, flags and environment), because
the cache key covers the options that shape the packages: compile and serve with the same ones.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from config import load_settings
from engine import ConfigError, ModelLoadError
from engine.backends.aoti_compile import compile_model
from engine.compile_cache import cache_dir
from service.host import plans


def compile_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="inferpool compile",
        description="Compile the configured models with AOTInductor into the compile cache. Takes the "
        "settings `inferpool serve` takes (see `inferpool serve --help`); serve with the same ones.",
    )
    parser.add_argument("--config", type=Path, help="TOML config file (default: config/default.toml)")
    args, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(args.config, rest)
        models = plans(settings)
    except (ValidationError, ConfigError, FileNotFoundError) as exc:
        print(f"inferpool compile: invalid configuration: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    directories = set()
    for model in models:
        options = replace(model.options, backend="aoti")
        try:
            packages = compile_model(model.source, options, progress)
        except (ModelLoadError, ConfigError) as exc:
            print(f"inferpool compile: {exc}", file=sys.stderr)
            return 1
        fresh = sum(p.compile_seconds is not None for p in packages)
        progress(f"{model.source}: {len(packages)} package(s), {fresh} compiled now, {len(packages) - fresh} cached")
        directories.add(cache_dir(options.compile_cache_dir))
    serve = ["inferpool", "serve", *([f"--config={args.config}"] if args.config else []), *rest]
    print(f"packages are in {', '.join(map(str, sorted(directories)))}")
    print(f"serve them with: {shlex.join([*serve, '--runtime.backend', 'aoti'])}")
    return 0
