"""CPU per request of the response cache against the cache off, in process (the lane, as lane_cpu).

    python -m loadtest.bench cache_cpu [--traffic miss|hit] [--cache-mb 0 1 64] [--body v2-json|predict]
                                       [--looks sampled every] [--start filled|empty]
    python -m loadtest.bench cache_cpu --profile 64      # where a miss's CPU goes, at a 64 MB cache

Serves the default model (digits, one process) through ``--connections`` in-memory connections
on the server's own protocol class (``loadtest.bench lane_cpu``), and reports the process CPU
per request (``time.process_time``, which other load on a shared machine disturbs less than
req/s) for each ``response_cache_mb`` of ``--cache-mb``, in interleaved rounds, their medians.
0 is the cache off. Each round of a size starts with a new cache filled to its bound by other
requests (each sent twice, so that it is kept), as a long-running server's is, and a collected
heap (with the cache off too), and drops the cache after.

``--traffic miss``: every request a new image (none repeats, no hit is possible): what a miss
costs, which should be within the rounds' spread of the cache off. ``hit``: ``--hot`` images
over and over: what a hit costs.

``--looks``: each cache size once per way its cheap model's sampler may stand
(service/cache_sampling.py): ``sampled``, as after 4,096 looks without a hit (one request in 32
looked at: what one-off traffic pays in the long run), and ``every``, every request looked at
(what a look costs; sampling is held off for the round). ``--start empty``: each round's cache
starts empty instead, as a new server's (and, with no repeats, the HTTP ``digits-miss`` case's all
along): holding a filled cache measured about +0.6-0.95 µs a request by itself (docs/traffic.md).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, NamedTuple

import numpy as np
import uvloop

from inferpool.config import load_settings
from inferpool.harness.payloads import Payload, json_request, v2_request
from inferpool.service import cache_sampling
from inferpool.service.app import create_app
from inferpool.service.cache_look import CacheLook
from inferpool.service.frontdoor import FrontDoor, Served
from loadtest.bench import case_parser
from loadtest.bench.lane_cpu import Connections

BODIES: dict[str, Callable[[np.ndarray[Any, Any]], Payload]] = {
    "v2-json": lambda image: v2_request("digits", {"image": image.astype(np.float32)}, binary=False),
    "predict": lambda image: json_request(image[0]),
}
FULL = 0.97
"""A cache holding this share of its bound counts as filled."""


@contextmanager
def sampled(served: list[Served]) -> Iterator[None]:
    """Each model's sampler as after ``QUIET`` looks without a hit: one request in ``EVERY`` looked at."""
    for record in served:
        record.sampler.hit()
        for _ in range(cache_sampling.QUIET):
            record.sampler.missed()
    yield


@contextmanager
def every(served: list[Served]) -> Iterator[None]:
    """Every request looked at: sampling held off for the round."""
    quiet, cache_sampling.QUIET = cache_sampling.QUIET, sys.maxsize
    for record in served:
        record.sampler.hit()
    try:
        yield
    finally:
        cache_sampling.QUIET = quiet


LOOKS: dict[str, Callable[[list[Served]], AbstractContextManager[None]]] = {"sampled": sampled, "every": every}


class Setup(NamedTuple):
    """A round's cache: its size (0: off) and how its looks are sampled ("" when off)."""

    megabytes: float
    looks: str

    @property
    def name(self) -> str:
        return "off" if self.megabytes == 0 else f"{self.megabytes:g} MB, {self.looks} looks"


def images(body: str, seed: int) -> Iterator[bytes]:
    """Requests of new 8x8 digit images (pixel values 0..16), without end: none repeats."""
    rng = np.random.default_rng(seed)
    make = BODIES[body]
    while True:
        for image in rng.integers(0, 17, size=(1024, 1, 1, 8, 8)):
            yield make(image).encode("127.0.0.1", 8000)


def cache_cpu_parser() -> argparse.ArgumentParser:
    parser = case_parser("cache_cpu", __doc__)
    parser.add_argument("--traffic", choices=("miss", "hit"), default="miss")
    parser.add_argument("--cache-mb", type=float, nargs="+", default=[0.0, 1.0, 64.0])
    parser.add_argument("--looks", choices=sorted(LOOKS), nargs="+", default=["sampled", "every"])
    parser.add_argument("--start", choices=("filled", "empty"), default="filled", help="each round's cache")
    parser.add_argument("--body", choices=sorted(BODIES), default="v2-json")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--wakeups", type=int, default=100, help="loop wake-ups a round, a request per connection")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hot", type=int, default=256, help="with --traffic hit: the images repeated")
    parser.add_argument("--profile", type=float, metavar="MB", help="profile one round at this size instead")
    return parser


class Rounds:
    def __init__(self, app: Any, args: argparse.Namespace) -> None:
        self.door: FrontDoor = app.state.door
        self.args = args
        self.opened = Connections(app, args.connections)
        self.new = images(args.body, seed=1)
        self.hot = itertools.cycle(list(itertools.islice(images(args.body, seed=2), args.hot)))

    async def fill(self, megabytes: float) -> None:
        """A new cache of ``megabytes`` (none at 0), filled to its bound by requests sent twice
        (left empty with ``--start empty``)."""
        door = self.door
        door.cache_look = CacheLook.of_megabytes(megabytes)
        cache = None if door.cache_look is None or self.args.start == "empty" else door.cache_look.cache
        with every(door.served()):  # sampling, a request sent twice would be kept one time in 64
            while cache is not None and cache.bytes < FULL * cache.max_bytes:
                chunk = list(itertools.islice(self.new, len(self.opened.opened) * 8))
                for _ in range(2):
                    await self.opened.run(iter(chunk), 8)
            await self.opened.run(self.traffic(20), 20)  # warm (and, for hits, the hot images held)
        # Filling runs thousands of requests the cache off does not: their garbage (each lane
        # request is a cycle) tipped a full collection into the measured window of every round
        # with the cache on and of none without it (+0.4 µs a request at 1 MB, +2.6 at 64 MB).
        gc.collect()

    def traffic(self, wakeups: int) -> Iterator[bytes]:
        """The requests of ``wakeups``, made before they are sent (their making is not measured)."""
        source = self.new if self.args.traffic == "miss" else self.hot
        return iter(list(itertools.islice(source, wakeups * len(self.opened.opened))))

    def setups(self) -> list[Setup]:
        """The cache off once, each size once per way of looking."""
        looks = self.args.looks
        return [Setup(size, way) for size in self.args.cache_mb for way in ([""] if size == 0 else looks)]

    async def once(self, setup: Setup) -> float:
        await self.fill(setup.megabytes)
        traffic = self.traffic(self.args.wakeups)
        try:
            looking = LOOKS[setup.looks](self.door.served()) if setup.megabytes else nullcontext()
            with looking:
                return await self.opened.cpu_per_request(traffic, self.args.wakeups)
        finally:
            self.door.cache_look = None
            gc.collect()

    async def all(self) -> dict[Setup, list[float]]:
        found: dict[Setup, list[float]] = {setup: [] for setup in self.setups()}
        for _ in range(self.args.rounds):
            for setup in found:
                found[setup].append(await self.once(setup))
        return found

    async def profile(self, megabytes: float) -> None:
        import cProfile
        import pstats

        await self.fill(megabytes)
        traffic = self.traffic(self.args.wakeups)
        with LOOKS[self.args.looks[0]](self.door.served()):
            profiler = cProfile.Profile()
            profiler.enable()
            await self.opened.run(traffic, self.args.wakeups)
            profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def cache_cpu(argv: list[str] | None = None) -> dict[Setup, list[float]]:
    """CPU µs per request of each round, by cache setup (its size in MB, 0 = off, and its looks)."""
    args = cache_cpu_parser().parse_args(argv)
    sizes = [size for size in args.cache_mb if size > 0] or [1.0]
    app = create_app(load_settings(None, ["--workers", "1", "--response-cache-mb", str(sizes[0])]))
    host = app.state.host
    host.start()  # the lifespan's work, without a server to run it
    host.wait_loaded(120)

    async def measured() -> dict[Setup, list[float]]:
        rounds = Rounds(app, args)  # in the loop: its connections' protocols take the running one
        if args.profile is not None:
            await rounds.profile(args.profile)
            return {}
        return await rounds.all()

    try:
        found = uvloop.run(measured())
    finally:
        host.close()
    if args.profile is not None:
        return {}
    off = found.get(Setup(0.0, ""))
    for setup, spent in found.items():
        median = statistics.median(spent)
        versus = ""
        if off is not None and setup.megabytes != 0:  # each round against the same round's cache off: drift cancels
            paired = statistics.median(on - alone for on, alone in zip(spent, off, strict=True))
            versus = f" ({median / statistics.median(off):.2f}x off; {paired:+.2f} µs, paired by round)"
        print(f"{args.traffic}, {args.body}, cache {setup.name}: CPU per request median {median:.2f} µs{versus}")
    return found
