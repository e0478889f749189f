"""``inferpool COMMAND [ARGS]``: the command table and the entry point."""

from __future__ import annotations

import sys
from collections.abc import Callable

from inferpool.cli.bench import bench_main
from inferpool.cli.compile import compile_main
from inferpool.cli.serve import serve
from inferpool.cli.tune.command import tune_main


def main(argv: list[str] | None = None) -> int:
    """``inferpool COMMAND ...``: each command parses its own arguments."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][0](argv[1:])
    usage = "\n".join(f"  {name:<10}{summary}" for name, (_, summary) in sorted(COMMANDS.items()))
    print(f"usage: inferpool COMMAND [ARGS]\n\nServe a PyTorch model over HTTP on CPUs.\n\ncommands:\n{usage}")
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


# name -> (entry point taking the arguments after the name, one-line summary for the usage text)
COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "serve": (serve, "start the HTTP server (--help lists every setting)"),
    "compile": (
        compile_main,
        "prepare the cache serve reads (ONNX exports, AOTInductor packages) ahead of time",
    ),
    "bench": (bench_main, "time the bare model call vs the HTTP round trip on this machine (server overhead)"),
    "tune": (tune_main, "search the fastest serving settings within a p99 objective and a time budget; write them"),
}


if __name__ == "__main__":
    sys.exit(main())
