"""``inferpool serve [--config FILE] [--port N] [--runtime.backend eager] ...``"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from inferpool.cli.argv import config_argument, planned, settings_from_argv
from inferpool.config import Settings
from inferpool.service.http.protocol import guarded_protocol
from inferpool.service.telemetry.logs import configure_logging

log = logging.getLogger("inferpool")


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="inferpool serve", add_help=False)
    config_argument(parser)
    args, rest = parser.parse_known_args(argv)
    # Sized and every thread plan made: an impossible budget is refused before binding a port.
    settings = settings_from_argv("inferpool", args, rest, planned)
    if isinstance(settings, int):
        return settings
    configure_logging(settings.log_level, settings.log_format)
    metrics_dir = _share_metrics(settings)
    # After _share_metrics: prometheus-client reads it at import.
    from inferpool.service.processes.supervisor import Supervisor

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
