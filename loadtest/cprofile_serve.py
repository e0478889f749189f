"""``inferpool serve`` with every serving process under cProfile, timed by its thread's CPU clock.

    INFERPOOL_CPROFILE_DIR=DIR python -m loadtest.cprofile_serve [serve] [inferpool serve options]

Each serving process profiles its whole life (from its fork to its drain) and writes
``DIR/serving-<pid>.prof`` when it stops (SIGTERM, as the launcher stops a server). The clock is
``time.thread_time_ns``: a wall clock would charge a function for the time its process waited
for a core, which on a loaded machine is most of a socket write's. cProfile adds a fixed cost to
every call, so the absolute figures are several times the real ones; what it shows is the split
(``python -m loadtest.bench http_cpu --profile DIR`` prints it). py-spy is not installed here,
and Python 3.11 has no perf trampoline.
"""

from __future__ import annotations

import cProfile
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DIRECTORY = "INFERPOOL_CPROFILE_DIR"


def profiled(serve: Callable[..., int], directory: Path) -> Callable[..., int]:
    """``Supervisor._serve`` (what a forked serving process runs), under cProfile."""

    def run(*args: Any, **kwargs: Any) -> int:
        import time

        profile = cProfile.Profile(time.thread_time_ns, 1e-9)
        profile.enable()
        try:
            return serve(*args, **kwargs)
        finally:
            profile.disable()
            profile.dump_stats(directory / f"serving-{os.getpid()}.prof")

    return run


def main() -> int:
    directory = Path(os.environ[DIRECTORY])
    directory.mkdir(parents=True, exist_ok=True)
    from inferpool.cli import serve as serve_command

    share = serve_command._share_metrics

    def share_then_profile(settings: Any) -> Path:
        found = share(settings)
        # Imported only now: prometheus-client must see its directory first (cli/serve.py).
        from inferpool.service.processes.supervisor import Supervisor

        Supervisor._serve = profiled(Supervisor._serve, directory)  # type: ignore[method-assign]
        return found

    serve_command._share_metrics = share_then_profile
    from inferpool.cli.main import main as inferpool

    args = sys.argv[1:]
    return inferpool(["serve", *(args[1:] if args[:1] == ["serve"] else args)])  # the launcher's argv names it


if __name__ == "__main__":
    sys.exit(main())
