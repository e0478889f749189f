"""Work that loads the served model's libraries, run in a child process that is gone before any
server is measured.

A process that imports torch and runs a model maps the same library pages a server's supervisor
maps to load it: libtorch's and onnxruntime's loading code. Once its serving processes are
ready, the supervisor hands those pages back to the kernel (``MADV_PAGEOUT``,
inferpool.service.processes.idle_pages), which reclaims a page only while no other process maps
it; so a load generator that had measured the bare engine in its own process kept ~113 MiB of
them resident in the digits supervisor, half of it counted in the tree's PSS: the tree read
272-275 MiB instead of 235-238 (each library private to the tree, as in a container) and
``loadtest.compare`` charged it to InferPool. Run in a spawned child instead, the pages leave
with the child. (A spawned child, not a fork: the parent has none of those libraries to share,
and forking a process that holds threads can hang.)
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_apart(function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` in a spawned child process (``function`` importable by its module and
    name, its arguments and result picklable); the child has exited when this returns."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(function, *args).result()
