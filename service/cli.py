"""``inferpool serve [--config FILE] [--port N] [--runtime.backend eager] ...``"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import uvicorn
from pydantic import ValidationError

from config import Settings, load_settings
from engine import ConfigError
from engine.threads import plan_threads
from service.bench_command import bench_main
from service.compile_command import compile_main
from service.host import plans
from service.logs import configure_logging

log = logging.getLogger("inferpool")
SETTINGS_ENV = "INFERPOOL_EFFECTIVE_SETTINGS"  # how worker processes get the parent's settings


def main(argv: list[str] | None = None) -> int:
    """``inferpool COMMAND ...``: each command parses its own arguments."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][0](argv[1:])
    usage = "\n".join(f"  {name:<10}{summary}" for name, (_, summary) in sorted(COMMANDS.items()))
    print(f"usage: inferpool COMMAND [ARGS]\n\nServe a PyTorch model over HTTP on CPUs.\n\ncommands:\n{usage}")
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="inferpool serve", add_help=False)
    parser.add_argument("--config", type=Path, help="TOML config file (default: config/default.toml)")
    args, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(args.config, rest)
        # Refuse an impossible thread budget before binding a port.
        models = plans(settings)
        for model in models:
            plan_threads(model.options, shares=settings.workers * len(models))
    except (ValidationError, ConfigError, FileNotFoundError) as exc:
        print(f"inferpool: invalid configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    options = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": "httptools",
        "log_config": None,  # keep the handler configure_logging installed
        "access_log": False,  # one line per request costs more than a small model's inference
        "timeout_graceful_shutdown": settings.drain_seconds,
    }
    if settings.workers == 1:
        from service.app import create_app
        from service.server import DrainingServer

        app = create_app(settings)
        config = uvicorn.Config(app, **options)  # type: ignore[arg-type]
        DrainingServer(config, app.state.host, app.state.activity, settings.drain_seconds).run()
        return 0
    # Several processes: uvicorn's supervisor owns the signals; it stops accepting at once and
    # waits up to drain_seconds for open requests.
    _share_metrics(settings)
    payload = settings.model_dump(mode="json")
    if settings.api_key is not None:  # dumps mask secrets; the workers need the real key
        payload["api_key"] = settings.api_key.get_secret_value()
    os.environ[SETTINGS_ENV] = json.dumps(payload)
    uvicorn.run("service.cli:app_from_parent", factory=True, workers=settings.workers, **options)  # type: ignore[arg-type]
    return 0


def _share_metrics(settings: Settings) -> None:
    """prometheus-client's multiprocess mode: one directory for all workers, empty at start
    (files left by an earlier run would be summed into this one's counters)."""
    directory = settings.metrics_dir or Path(tempfile.gettempdir()) / f"inferpool-metrics-{os.getpid()}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    log.info("%d worker processes share metrics in %s", settings.workers, directory)


def app_from_parent() -> object:
    """uvicorn's app factory in each worker process: the parent's validated settings."""
    from service.app import create_app

    settings = Settings.model_validate_json(os.environ[SETTINGS_ENV])
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings)


# name -> (entry point taking the arguments after the name, one-line summary for the usage text)
COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "serve": (serve, "start the HTTP server (--help lists every setting)"),
    "compile": (compile_main, "compile models with AOTInductor ahead of time, into the cache serve reads"),
    "bench": (bench_main, "time the bare model call vs the HTTP round trip on this machine (server overhead)"),
}


if __name__ == "__main__":
    sys.exit(main())
