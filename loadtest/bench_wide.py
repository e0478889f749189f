"""The no-flag server on the workloads users bring, against the bare engine's own rate (the limit),
with and without lending idle cores to a call running alone (inferpool.engine.wide).

    python -m loadtest.bench_wide [--workloads resnet50,minilm16,minilm1,digits] [--duration 8]
                                  [--warmup 2] [--rounds 1] [--out DIR]

Per workload, one server at a time on a free 127.0.0.1 port, wrk (Debian's) closed-loop at each
concurrency: ``defaults`` (no flags beyond the workload's model or config) and ``lend off``
(``--runtime.lend-idle-cores off``, the plan before it), alternating order each round. The limit
is measured in this process first, no HTTP: one stream on every core (batch of one request, the
wide artifact) and every core busy (one single-thread runtime per core, each on its own thread).
Prints Markdown; writes ``runs.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine import RuntimeOptions, ServedModel
from inferpool.engine.threads import usable_cpus
from inferpool.harness.payloads import SENTENCE, Payload, digits_json, json_request, minilm_json, v2_request
from inferpool.harness.server import REPO_ROOT, inferpool_serve, launch
from loadtest import wrk

MINILM = str(REPO_ROOT / "config" / "minilm.toml")
SENTENCES = [f"{SENTENCE} Variation number {i} of the sixteen." for i in range(16)]
IMAGE = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)


@dataclass(frozen=True)
class Workload:
    args: tuple[str, ...]
    payload: Callable[[], Payload]
    concurrency: tuple[int, ...]
    items: int
    """Items (images, sentences) per request."""
    source: str
    handler: str | None = None


WORKLOADS = {
    "resnet50": Workload(
        ("--model", "loadtest.resnet:build"), lambda: v2_request("resnet50", {"image": IMAGE}), (1, 4, 16), 1,
        "loadtest.resnet:build",
    ),
    "minilm16": Workload(
        ("--config", MINILM), lambda: json_request(SENTENCES), (1, 4), 16,
        "inferpool.engine.zoo.minilm:build", "inferpool.engine.zoo.minilm:MiniLMHandler",
    ),
    "minilm1": Workload(
        ("--config", MINILM), minilm_json, (1, 8, 32), 1,
        "inferpool.engine.zoo.minilm:build", "inferpool.engine.zoo.minilm:MiniLMHandler",
    ),
    "digits": Workload((), digits_json, (1, 8, 64), 1, "inferpool.engine.zoo.digits:build"),
}  # fmt: skip
VARIANTS = {"defaults": (), "lend off": ("--runtime.lend-idle-cores", "off")}


def _inputs(model: ServedModel, workload: Workload) -> Mapping[str, Any]:
    """The arrays one request's payload becomes (through the handler, for text)."""
    if workload is WORKLOADS["resnet50"]:
        return {"image": IMAGE}
    if model.handler is not None:
        texts = SENTENCES if workload.items > 1 else [SENTENCE]
        return model.handler.preprocess(texts)[0]
    return model.module.examples(1)


def _rate(call: Callable[[], object], seconds: float, threads: int = 1) -> float:
    """Calls per second of ``call`` on ``threads`` threads at once."""
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def loop(index: int) -> None:
        while time.perf_counter() < stop:
            call()
            counts[index] += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - started)


def limits(workload: Workload, seconds: float) -> dict[str, float]:
    """Requests/s of the bare engine (onnxruntime, as the defaults serve these): one stream on every
    core, and every core busy with single-thread runtimes."""
    cpus = usable_cpus()
    options = RuntimeOptions(backend="onnxruntime", lend_idle_cores="off", warmup_iters=1)
    wide = ServedModel.load(
        workload.source, RuntimeOptions(backend="onnxruntime", intra_op_threads=cpus, num_runtimes=1, warmup_iters=1),
        handler=workload.handler,
    )  # fmt: skip
    arrays = _inputs(wide, workload)
    one_stream = _rate(lambda: wide.call(arrays), seconds)
    wide.close()
    narrow = ServedModel.load(workload.source, options, handler=workload.handler)
    every_core = _rate(lambda: narrow.call(arrays), seconds, threads=cpus)
    narrow.close()
    return {"one_stream": round(one_stream, 1), "every_core": round(every_core, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-wide-"))
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for name in args.workloads.split(","):
        workload = WORKLOADS[name]
        limit = limits(workload, min(args.duration, 5.0))
        print(f"\n### {name}: bare engine {limit['one_stream']} req/s one stream, {limit['every_core']} every core")
        print("| variant | " + " | ".join(f"c={c} req/s (p99 ms)" for c in workload.concurrency) + " | CPU at c=1 |")
        print("|---|" + "---|" * (len(workload.concurrency) + 1))
        order = list(VARIANTS)
        for round_ in range(args.rounds):
            for variant in order if round_ % 2 == 0 else order[::-1]:
                command = inferpool_serve(*workload.args, *VARIANTS[variant])
                with launch(command, ready_timeout=300, name=f"{name}-{variant}") as server:
                    cells, first_cpu = [], 0.0
                    for concurrency in workload.concurrency:
                        run = wrk.run_one(
                            server.url, workload.payload(), concurrency, duration=args.duration, warmup=args.warmup,
                            label=variant, server_pid=server.process.pid, scratch=out,
                        )  # fmt: skip
                        run |= {"workload": name, "round": round_, "limit": limit}
                        runs.append(run)
                        first_cpu = first_cpu or run["server_cpu_cores"]
                        cells.append(f"{run['achieved_rps']} ({run['latency_ms']['p99']})")
                print(f"| {variant} | " + " | ".join(cells) + f" | {first_cpu} |")
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print(f"\nruns: {out / 'runs.json'}")


if __name__ == "__main__":
    main()
