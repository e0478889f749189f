"""Seconds from ``inferpool serve`` to ready, cold (an empty compile cache) and warm (the cache the
cold start wrote: exports and ``auto``'s choice).

    python -m loadtest.bench_start [--model loadtest.resnet:build] [--runs 2] [-- extra serve flags]

Each run is a new server on a free 127.0.0.1 port with its own cache directory for the cold start;
the warm runs reuse the last cold run's. Prints Markdown.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from inferpool.harness.server import inferpool_serve, launch


def ready_seconds(model: str, cache: Path, extra: list[str]) -> float:
    command = inferpool_serve("--model", model, "--runtime.compile-cache-dir", str(cache), *extra)
    started = time.monotonic()
    with launch(command, ready_timeout=600, name="start"):
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="loadtest.resnet:build")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("extra", nargs="*", help="more `inferpool serve` flags (after --)")
    args = parser.parse_args()
    cold, warm = [], []
    for _ in range(args.runs):
        cache = Path(tempfile.mkdtemp(prefix="bench-start-"))
        try:
            cold.append(ready_seconds(args.model, cache, args.extra))
            warm.append(ready_seconds(args.model, cache, args.extra))
        finally:
            shutil.rmtree(cache, ignore_errors=True)  # a ResNet-50's exports: ~100 MB a run
    print(f"| {args.model} | cold s | warm s |\n|---|---|---|")
    for c, w in zip(cold, warm, strict=True):
        print(f"| run | {c:.1f} | {w:.1f} |")
    print(f"| median | {statistics.median(cold):.1f} | {statistics.median(warm):.1f} |")


if __name__ == "__main__":
    main()
