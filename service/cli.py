"""``inferpool serve [--config FILE] [--port N] [--runtime.backend eager] ...``"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import uvicorn
from pydantic import ValidationError

from config import load_settings
from engine import ConfigError
from engine.threads import plan_threads
from service.app import create_app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferpool", description="Serve a PyTorch model over HTTP on CPUs.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="start the HTTP server", add_help=False)
    serve.add_argument("--config", type=Path, help="TOML config file (default: config/default.toml)")
    args, rest = parser.parse_known_args(argv)
    try:
        settings = load_settings(args.config, rest)
        plan_threads(settings.runtime)  # refuse an impossible thread budget before binding a port
    except (ValidationError, ConfigError, FileNotFoundError) as exc:
        print(f"inferpool: invalid configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level,
        access_log=False,  # one line per request costs more than a small model's inference
        timeout_graceful_shutdown=settings.drain_seconds,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
