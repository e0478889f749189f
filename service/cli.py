"""``inferpool serve [--config FILE] [--port N] [--runtime.backend eager] ...``"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from config import Settings, error_lines, load_settings
from engine import ConfigError
from engine.threads import plan_threads
from service.bench_command import bench_main
from service.compile_command import compile_main
from service.host import plans, sized
from service.logs import configure_logging
from service.protocol import guarded_protocol

log = logging.getLogger("inferpool")


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
        settings = sized(load_settings(args.config, rest))
        # Refuse an impossible thread budget before binding a port.
        for model in plans(settings):
            plan_threads(model.options, shares=settings.cpu_shares)
    except (ValidationError, ConfigError, FileNotFoundError) as exc:
        for line in error_lines(exc):
            print(f"inferpool: invalid configuration: {line}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    metrics_dir = _share_metrics(settings)
    from service.supervisor import Supervisor  # after _share_metrics: prometheus-client reads it at import

    options = {
        "loop": "uvloop",
        "http": guarded_protocol(settings.read_timeout_seconds, settings.max_connections),
        "log_config": None,  # keep the handler configure_logging installed
        "access_log": False,  # one line per request costs more than a small model's inference
        "timeout_graceful_shutdown": settings.drain_seconds,
    }
    try:
        return Supervisor(settings, options).run()
    finally:
        if settings.metrics_dir is None:  # ours, under the temp dir: nobody reads it after us
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _share_metrics(settings: Settings) -> Path:
    """prometheus-client's multiprocess mode: one directory for all serving processes, empty
    at start (files left by an earlier run would be summed into this one's counters)."""
    directory = settings.metrics_dir or Path(tempfile.gettempdir()) / f"inferpool-metrics-{os.getpid()}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    if "prometheus_client.values" in sys.modules:
        raise RuntimeError("prometheus_client was imported before its multiprocess directory was set")
    log.info("serving processes share metrics in %s", directory)
    return directory


# name -> (entry point taking the arguments after the name, one-line summary for the usage text)
COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "serve": (serve, "start the HTTP server (--help lists every setting)"),
    "compile": (compile_main, "compile models with AOTInductor ahead of time, into the cache serve reads"),
    "bench": (bench_main, "time the bare model call vs the HTTP round trip on this machine (server overhead)"),
}


if __name__ == "__main__":
    sys.exit(main())
