"""CPU per request through the engine alone: ``ServedModel.infer`` against the bare model call.

    python -m loadtest.bench engine_request [--dispatch inline] [--repeats 5]
    PYTHONPATH=CHECKOUT python loadtest/bench/engine_request.py [...]     # another tree's inferpool

Loads the default model as ``inferpool serve`` does with no flags (onnxruntime; ``--dispatch``
pins the executor, inline by default as ``auto`` picks on this machine), then, on one event loop,
awaits ``infer`` on the body ``/predict`` decodes (nested lists; ``--array`` for a float32 array,
as v2 decodes) with a deadline, ``--requests`` times per repeat, and times the bare runtime call
the same way. Prints the process CPU per request of each and their difference: what the engine
adds to a call (admission, validation, bookkeeping). Run it for two checkouts alternately to
compare a change to the engine's request path with the revision before it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

import numpy as np

from inferpool.engine.models.source_kinds import DEFAULT_MODEL
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.serving.served import ServedModel


def per_request(run: Callable[[int], None], requests: int, repeats: int) -> list[float]:
    run(requests // 10)  # warm
    found = []
    for _ in range(repeats):
        started = time.process_time()
        run(requests)
        found.append((time.process_time() - started) / requests * 1e6)
    return sorted(found)


def engine_request_parser() -> argparse.ArgumentParser:
    # Not loadtest.bench.case_parser: this file also runs on its own against another checkout.
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench engine_request",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dispatch", default="inline", choices=["inline", "threads"])
    parser.add_argument("--array", action="store_true", help="send a float32 array (as v2 decodes), not lists")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    return parser


def engine_request(argv: list[str] | None = None) -> dict[str, list[float]]:
    """CPU µs per request of each repeat, least first: ``infer`` (the engine) and ``call`` (bare)."""
    args = engine_request_parser().parse_args(argv)
    model = ServedModel.load(DEFAULT_MODEL, RuntimeOptions(backend="onnxruntime", dispatch=args.dispatch))
    image = np.zeros((1, 8, 8), np.float32)
    payload: object = image if args.array else image.tolist()
    arrays = {"image": image[None]}

    async def ask(count: int) -> None:
        for _ in range(count):
            await model.infer(payload, time.monotonic() + 5.0, "bench")

    def bare(count: int) -> None:
        for _ in range(count):
            model.call(arrays)

    try:
        engine = per_request(lambda count: asyncio.run(ask(count)), args.requests, args.repeats)
        call = per_request(bare, args.requests, args.repeats)
    finally:
        model.close()
    print(
        f"{args.dispatch}, {'array' if args.array else 'lists'}: infer min {engine[0]:.1f} µs, median "
        f"{engine[len(engine) // 2]:.1f}; bare call min {call[0]:.1f}, median {call[len(call) // 2]:.1f}; "
        f"engine adds {engine[0] - call[0]:.1f} µs (min - min)"
    )
    return {"infer": engine, "call": call}


if __name__ == "__main__":
    engine_request()
