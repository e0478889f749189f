"""The settings every command takes, from its command line: one parser, one error format."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import ValidationError

from inferpool.config import Settings, error_lines, load_settings
from inferpool.config.paths import make_importable
from inferpool.engine import ConfigError
from inferpool.engine.plan.threads import plan_threads
from inferpool.service.models.host import plans, settings_shares, sized

CONFIG_HELP = "TOML config file (default: config/default.toml)"
SETTINGS_ERRORS = (ValidationError, ConfigError, FileNotFoundError, ValueError)


def config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help=CONFIG_HELP)


def settings_from_argv(
    prog: str, args: argparse.Namespace, rest: Sequence[str], then: Callable[[Settings], Settings] = lambda s: s
) -> Settings | int:
    """``serve``'s settings from ``--config`` and the remaining flags, passed through ``then``
    (a check or a sizing); on a bad value, one line per problem on stderr and exit status 2."""
    try:
        settings = load_settings(args.config, list(rest))
        make_importable(settings.app_dir)
        return then(settings)
    except SETTINGS_ERRORS as exc:
        refuse(prog, exc)
        return 2


def refuse(prog: str, exc: Exception) -> None:
    for line in error_lines(exc):
        print(f"{prog}: invalid configuration: {line}", file=sys.stderr)


def planned(settings: Settings) -> Settings:
    """``settings`` sized as serve sizes them, every model's threads planned: a process count or a
    thread budget that serve refuses is refused here (exit status 2) before anything is built."""
    settings = sized(settings)
    shares = settings_shares(settings)
    for model in plans(settings):
        plan_threads(model.options, shares=shares)
    return settings
