"""``inferpool bench [--config FILE] [--count N] [--seconds S] [--json] [serve settings...]``

How much does serving cost on *your* hardware and model? Times, on the model's example inputs:

- the bare model call (the engine's runtime call, no server, no thread hand-off),
- the engine's ``infer`` (validation and the hand-off to a worker thread, no HTTP),
- the HTTP round trip of ``POST /predict`` (JSON) and of v2 infer with binary tensors, one
  request at a time over one keep-alive connection to a real ``inferpool serve`` started with
  the same settings on a free 127.0.0.1 port,
- gRPC ModelInfer with raw tensors (models without a handler), one call at a time on one
  channel to the same server,
- the same ``POST /predict`` to a bare ASGI reference (service/bench_reference.py: uvicorn with
  the same loop and HTTP settings, orjson in and out around the same bare model call, inline),

and reports the server overhead (HTTP minus bare, in µs and as a ratio), the CPU time each
server spent per request (its whole process tree, from /proc: InferPool's HTTP and gRPC front
ends beside the bare ASGI app's), InferPool's
``/predict`` overhead beside the bare ASGI app's and their ratio, the backend and
dispatch the server chose, and the thread budget. With ``--runtime.backend auto`` the bench
chooses once, while loading its own copy, and starts the server with that backend, so that
both sides time the same one (the report keeps ``auto``'s table). The phases run in interleaved rounds, so
that a noisy neighbour slows all of them alike instead of one. The settings are ``serve``'s
(``inferpool bench --model X --runtime.backend onnxruntime``). A model with a handler (text
in) needs ``--inputs``: the JSON value to send as ``{"inputs": ...}``; its bare call is still
the model on its example tensors, so its overhead includes the handler's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import uvloop

from inferpool.cli.argv import config_argument, refuse, settings_from_argv
from inferpool.cli.bench_report import format_table, summarize
from inferpool.config import Settings
from inferpool.config.grpc import grpc_server_for
from inferpool.engine import ConfigError, EngineError, ServedModel
from inferpool.engine.plan import halt_polling
from inferpool.harness.client import KeepAlive
from inferpool.harness.payloads import Payload, grpc_request, json_request, v2_request
from inferpool.harness.procs import tree_run_seconds
from inferpool.harness.server import free_port, inferpool_serve, launch, python_module
from inferpool.service.models.host import plans, settings_shares, sized

REFERENCE_PHASE = "bare_asgi"  # reported apart from the server's own phases
SERVE = (sys.executable, "-m", "inferpool.cli.main")  # this interpreter's InferPool, whatever is on PATH
REFERENCE = "inferpool.service.bench_reference"  # the bare ASGI app the bench compares with
SERVED = ("http", "grpc")  # the phases InferPool's server answers
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
Phase = Callable[[int, float], list[float]]
"""(most calls, seconds allowed) -> seconds per call."""


@dataclass
class Limits:
    count: int
    seconds: float
    rounds: int
    warmup: int
    ready_timeout: float


@dataclass
class Phases:
    order: dict[str, Phase] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    """Process CPU time spent in each phase (the client's own cost, for the HTTP phases)."""
    servers: dict[str, int] = field(default_factory=dict)
    """The pid of the server answering each phase that has one (its whole process tree counts)."""
    server_cpu_seconds: dict[str, float] = field(default_factory=dict)


def bench_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="inferpool bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    config_argument(parser)
    parser.add_argument("--count", type=int, default=2000, help="calls per phase, over all rounds (default 2000)")
    parser.add_argument("--seconds", type=float, default=30.0, help="most seconds of timing in all (default 30)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per phase first (default 50)")
    parser.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for the server")
    parser.add_argument("--inputs", help='JSON for {"inputs": ...}; needed for models with a handler')
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args, rest = parser.parse_known_args(argv)
    if args.count < 1 or args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--count and --rounds must be at least 1, --seconds positive, --warmup 0 or more")
    settings = settings_from_argv("inferpool bench", args, rest, sized)  # split the CPUs as serve will
    if isinstance(settings, int):
        return settings
    try:
        inputs = None if args.inputs is None else json.loads(args.inputs)
    except json.JSONDecodeError as exc:
        refuse("inferpool bench", exc)
        return 2
    serve_args = ([] if args.config is None else ["--config", str(args.config)]) + rest
    limits = Limits(args.count, args.seconds, args.rounds, args.warmup, args.ready_timeout)
    try:
        report = run(settings, serve_args, limits, inputs)
    except (EngineError, RuntimeError, TimeoutError, ConnectionError) as exc:
        # EngineError: the model cannot load or run here (ConfigError, ModelLoadError, ...).
        hint = "\n(raise --ready-timeout to wait longer)" if isinstance(exc, TimeoutError) else ""
        print(f"inferpool bench: {exc}{hint}", file=sys.stderr)
        return 2 if isinstance(exc, EngineError) else 1
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    return 0


def run(settings: Settings, serve_args: list[str], limits: Limits, inputs: object = None) -> dict[str, Any]:
    """Load the default model here, start the server beside it, time every phase."""
    plan = plans(settings)[0]
    shares = settings_shares(settings)  # the server's own split of the CPUs
    if plan.handler is not None and inputs is None:
        raise ConfigError(
            f"the model has a handler ({plan.handler}), so its requests are not tensors: pass --inputs with "
            """the JSON value of a request's "inputs", e.g. --inputs '["A sentence."]'"""
        )
    served = ServedModel.load(plan.source, plan.options, max_queue=settings.max_queue, shares=shares,
                              name=plan.name, handler=plan.handler)  # fmt: skip
    sys.setswitchinterval(settings.switch_interval)  # as the server does
    payload = inputs if inputs is not None else _payload(served)
    chosen = served.info.backend
    if chosen != plan.options.backend:
        # ``auto`` chose here; the server must serve that same backend, not time its own pick.
        serve_args = [*serve_args, "--runtime.backend", chosen]
    precision = served.info.precision_selection
    if plan.options.precision == "auto" and precision is not None:
        # Likewise the precision ``auto`` chose: bf16 named and strict serves the same build, ungated again.
        strict = ["--runtime.precision_strict", "true"] if precision["served"] == "bf16" else []
        serve_args = [*serve_args, "--runtime.precision", precision["served"], *strict]
    ready = limits.ready_timeout
    grpc_target = f"127.0.0.1:{free_port()}"
    served_args = [*serve_args, "--grpc-port", grpc_target.rsplit(":", 1)[1]]
    try:
        with (
            launch(inferpool_serve(*served_args, program=SERVE), name="the server", ready_timeout=ready) as server,
            launch(python_module(REFERENCE, *serve_args), name="the reference", ready_timeout=ready) as bare_app,
            asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
            grpc.insecure_channel(grpc_target) as channel,
        ):
            client, reference = KeepAlive(server.port), KeepAlive(bare_app.port)
            try:
                phases = _phases(served, payload, client, runner, channel)
                phases.order[REFERENCE_PHASE] = _http_phase(reference, reference.encode(json_request(payload)))
                phases.servers = {name: server.process.pid for name in phases.order if name.startswith(SERVED)}
                phases.servers[REFERENCE_PHASE] = bare_app.process.pid
                times = _interleave(phases, limits)
                facts = _server_facts(client, served.name)
                if facts["backend"] != chosen:
                    raise RuntimeError(f"the server runs backend {facts['backend']!r}, the bare calls ran {chosen!r}")
            finally:
                client.close()
                reference.close()
    finally:
        served.close()
    return _report(settings, served, facts, times, phases, limits)


def _payload(served: ServedModel) -> object:
    examples = served.module.example_inputs
    return next(iter(examples.values())) if len(examples) == 1 else dict(examples)


def _phases(
    served: ServedModel, payload: object, client: KeepAlive, runner: asyncio.Runner, channel: grpc.Channel
) -> Phases:
    phases = Phases()
    phases.order["bare"] = lambda count, budget: _timed(lambda: served.time_example_call(repeats=1), count, budget)

    async def engine(count: int, budget: float) -> list[float]:
        return await _timed_async(lambda: served.infer(payload), count, budget)

    phases.order["engine"] = lambda count, budget: runner.run(engine(count, budget))
    requests = {"http_json": json_request(payload)}
    if served.handler is None:
        examples = served.module.example_inputs
        inputs = {spec.name: examples[spec.name] for spec in served.schema.inputs}
        outputs = [spec.name for spec in served.schema.outputs]
        requests["http_v2_binary"] = v2_request(served.name, inputs, outputs)
    for name, request in requests.items():
        phases.order[name] = _http_phase(client, client.encode(request))
    if served.handler is None:
        phases.order["grpc"] = _grpc_phase(channel, grpc_request(served.name, inputs, outputs))
    return phases


def _grpc_phase(channel: grpc.Channel, request: bytes) -> Phase:
    call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(MODEL_INFER)  # bytes in, bytes out

    def exchange() -> float:
        started = time.perf_counter()
        try:
            call(request, timeout=60)
        except grpc.RpcError as exc:
            raise RuntimeError(f"gRPC ModelInfer answered {exc.code().name}: {exc.details()}") from None
        return time.perf_counter() - started

    return lambda count, budget: _timed(exchange, count, budget)


def _http_phase(client: KeepAlive, request: bytes) -> Phase:
    def exchange() -> float:
        started = time.perf_counter()
        status, body = client.exchange(request)
        elapsed = time.perf_counter() - started
        if status != 200:
            raise RuntimeError(f"the server answered {status}: {body[:500].decode(errors='replace')}")
        return elapsed

    return lambda count, budget: _timed(exchange, count, budget)


def _timed(call: Callable[[], float], count: int, budget: float) -> list[float]:
    """Up to ``count`` calls (at least one) within ``budget`` seconds; each call returns its own
    time (the bare call the engine's timing, an HTTP exchange without its status check)."""
    times: list[float] = []
    end = time.perf_counter() + budget
    while len(times) < count and (not times or time.perf_counter() < end):
        times.append(call())
    return times


async def _timed_async(call: Callable[[], Awaitable[object]], count: int, budget: float) -> list[float]:
    times: list[float] = []
    end = time.perf_counter() + budget
    while len(times) < count and (not times or time.perf_counter() < end):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


def _interleave(phases: Phases, limits: Limits) -> dict[str, list[float]]:
    for phase in phases.order.values():
        if limits.warmup:
            phase(limits.warmup, limits.seconds)
    times: dict[str, list[float]] = {name: [] for name in phases.order}
    per_round = -(-limits.count // limits.rounds)
    budget = limits.seconds / (limits.rounds * len(phases.order))
    for _ in range(limits.rounds):
        for name, phase in phases.order.items():
            pid = phases.servers.get(name)
            server_cpu = 0.0 if pid is None else tree_run_seconds(pid)
            cpu = time.process_time()
            times[name] += phase(min(per_round, limits.count - len(times[name])) or 1, budget)
            phases.cpu_seconds[name] = phases.cpu_seconds.get(name, 0.0) + time.process_time() - cpu
            if pid is not None:
                spent = tree_run_seconds(pid) - server_cpu
                phases.server_cpu_seconds[name] = phases.server_cpu_seconds.get(name, 0.0) + spent
    return times


def _server_facts(client: KeepAlive, model: str) -> dict[str, Any]:
    """What the server says it runs (its choices when the settings say ``auto``)."""
    status, body = client.exchange(client.encode(Payload(f"/v2/models/{model}/config", method="GET")))
    if status != 200:
        raise RuntimeError(f"GET /v2/models/{model}/config answered {status}")
    facts: dict[str, Any] = json.loads(body)
    return facts


def _report(
    settings: Settings,
    served: ServedModel,
    facts: dict[str, Any],
    times: dict[str, list[float]],
    phases: Phases,
    limits: Limits,
) -> dict[str, Any]:
    stats = {name: summarize(values) for name, values in times.items()}
    reference = stats.pop(REFERENCE_PHASE)
    bare = stats["bare"]
    overhead = {
        name: {
            "p50_us": round(s["p50_us"] - bare["p50_us"], 1),
            "p99_us": round(s["p99_us"] - bare["p99_us"], 1),
            "ratio_p50": round(s["p50_us"] / bare["p50_us"], 2),
        }
        for name, s in stats.items()
        if name != "bare"
    }
    client_cpu = {
        name: round(phases.cpu_seconds[name] / len(times[name]) * 1e6, 1) for name in times if name.startswith(SERVED)
    }
    server_cpu = {  # the bare ASGI app's too: the limit either front end is held to (#32)
        name: round(seconds / len(times[name]) * 1e6, 1) for name, seconds in phases.server_cpu_seconds.items()
    }
    ours = stats["http_json"]["p50_us"] - bare["p50_us"]
    theirs = reference["p50_us"] - bare["p50_us"]
    return {
        "model": served.name,
        "source": settings.model,
        "backend": facts["backend"],
        "backend_configured": settings.runtime.backend,
        "dispatch": facts["dispatch"],
        "dispatch_selection": facts.get("dispatch_selection"),
        "auto": served.selection.report() if served.selection.trials else None,
        "precision": served.info.precision_selection,
        # The round trips are one at a time: between them the cores idle, which a KVM guest
        # whose idle vCPUs halt at once makes the next call pay (counted as overhead here).
        "platform": halt_polling.advice(),
        "threads": {
            "server_processes": settings.workers,
            "runtimes": served.plan.runtimes,
            "intra_op_threads": served.plan.intra_op_threads,
            "usable_cpus": served.plan.cpus,
        },
        "limits": {"count": limits.count, "seconds": limits.seconds, "rounds": limits.rounds},
        "timings": stats,
        "overhead": overhead,
        "client_cpu_us_per_request": client_cpu,
        "server_cpu_us_per_request": server_cpu,
        "grpc_server": grpc_server_for(settings.grpc_server, settings.model_control_mode),
        "reference": {
            "bare_asgi": reference,
            "bare_asgi_overhead_p50_us": round(theirs, 1),
            "inferpool_overhead_p50_us": round(ours, 1),
            # Goal <= 1.5: InferPool's own machinery at most half again a bare ASGI handler's.
            "ratio_p50": round(ours / theirs, 2) if theirs > 0 else None,
        },
    }
