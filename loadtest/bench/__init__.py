"""The kept experiments, one named case each: ``python -m loadtest.bench <case> [options]``.

    python -m loadtest.bench --list          # every case, one line each
    python -m loadtest.bench pool --help     # a case's options

A case is the old ``loadtest/bench_<case>.py`` with the same options (``bench_pool`` is
``python -m loadtest.bench pool``). ``CASES`` maps each name to the module that holds it; the
module has ``<case>(argv)``, which runs it, and ``<case>_parser()``, its options (``<function>``
for ``<case>`` where the case names the function otherwise, as ``Case.function`` says). Modules are
imported only when their case runs, so ``--list`` needs neither torch nor a model.

Three cases compare checkouts by running the same file against another tree's ``inferpool``, so
they also run as files and import nothing of ``loadtest`` at the top:
``PYTHONPATH=CHECKOUT python loadtest/bench/app_cpu.py``, ``.../lane_cpu.py`` and ``.../engine_request.py``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

PROG = "python -m loadtest.bench"


@dataclass(frozen=True)
class Case:
    module: str  # under loadtest.bench
    summary: str  # one line, for --list
    function: str = ""  # the module's function, when not the case's name (``grpc`` would hide the module)

    def load(self) -> ModuleType:
        return importlib.import_module(f"loadtest.bench.{self.module}")


CASES: dict[str, Case] = {
    # In process: the engine's own costs.
    "pool": Case("pool", "RuntimePool borrow+return against deque and queue.Queue, ns per op"),
    "batching": Case("batching", "dynamic batching off vs on in process, digits, eager and onnxruntime"),
    "minilm": Case("batching", "MiniLM sentences/s and latency in process, per backend, batching off/on"),
    "engine_request": Case("engine_request", "CPU per request of ServedModel.infer against the bare model call"),
    "backends": Case("backends", "per-call latency and 2-thread scaling of eager, onnxruntime, torchscript"),
    "auto": Case("backends", "what backend auto picks per model, its table, how stable the pick is"),
    "defaults": Case("backends", "what the defaults (auto backend, auto dispatch) choose, and what choosing costs"),
    "static": Case("static", "the static backend and each of its options against eager, onnxruntime"),
    "aoti": Case("aoti", "AOTInductor (ctypes and PyTorch's loader) against eager and onnxruntime, RSS"),
    "idle_gap": Case("idle_gap", "a model call after an idle gap against calls back to back (the bare yardstick's)"),
    # In process: the service's own costs.
    "app_cpu": Case("app_cpu", "CPU per request through the whole ASGI app, no sockets (or the bare handler)"),
    "lane_cpu": Case(
        "lane_cpu", "CPU per request through the HTTP protocol and the lane in process (--stub: engine, door)"
    ),
    "cache_cpu": Case("cache_cpu", "CPU per request of the response cache (all misses or all hits) against it off"),
    "codec": Case("wire", "v2 binary vs JSON: server-side decode + encode, and end to end on a server"),
    "metrics": Case("metrics_cost", "GIL cost of the per-request metrics calls, old prometheus objects vs slots"),
    "http_cpu": Case("http_cpu", "server tree CPU µs per request at 64 connections, no-flag server, A/B of checkouts"),
    "lone": Case(
        "lone_request", "one connection, a request at a time: v2 JSON against /predict, wall and tree CPU, A/B"
    ),
    "fronts": Case(
        "http_cpu", "CPU µs per /predict request: bare handler under uvicorn, a plain protocol, granian", "fronts"
    ),
    "door_cost": Case("observability", "the door's cost per request: tracing, unsampled, access log (vs --base)"),
    # Real servers.
    "handoff": Case("handoff", "thread hand-off vs inline dispatch through the real server (wrk)"),
    "timeline": Case("timeline", "each serving process's calls, their gaps and a request's phases (trace spans)"),
    "batching_http": Case("batching", "dynamic batching off vs on against the real server over HTTP"),
    "embeddings": Case("wire", "/v1/embeddings against /predict on MiniLM, one server (--codec: in process)"),
    "observe": Case("observability", "tracing, access log, payload log per request on real servers (wrk)"),
    "door": Case("serving", "the door at its capacity: wrk below it is never shed"),
    "start": Case("serving", "seconds from inferpool serve to ready, cold and warm compile cache"),
    "wide": Case("serving", "the no-flag server per workload against the bare engine, lending idle cores or not"),
    "processes": Case("serving", "PSS of the process tree and start-up, one serving process vs the default"),
    "memory": Case("memory", "the no-flag tree's PSS per process and kind of mapping, idle and after wrk load"),
    "grpc": Case(
        "grpc_front", "gRPC ModelInfer per front end against HTTP v2 binary and JSON, server CPU per call", "grpc_case"
    ),
    "text_peers": Case("text_peers", "encoder folders (embedder, cross-encoder) against Infinity, same bodies (wrk)"),
    "container": Case("container", "the image against the same server on the host (docker, wrk)"),
    "response_cache": Case(
        "response_cache", "the response cache on vs off: MiniLM Zipf repeats at 32 connections, digits all misses"
    ),
    "priorities": Case("priorities", "priorities at 2x capacity: success rate and p99 of high against low"),
}


def runner(name: str) -> Callable[[list[str] | None], object]:
    """The function that runs case ``name`` on its command-line arguments."""
    case = CASES[name]
    run: Callable[[list[str] | None], object] = getattr(case.load(), case.function or name)
    return run


def parser(name: str) -> argparse.ArgumentParser:
    """Case ``name``'s options."""
    case = CASES[name]
    make: Callable[[], argparse.ArgumentParser] = getattr(case.load(), f"{case.function or name}_parser")
    return make()


def case_parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser every case starts from: its command as the program name, its docstring."""
    return argparse.ArgumentParser(
        prog=f"{PROG} {name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
