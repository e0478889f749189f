"""The reference workloads, and what each is measured against: the plain FastAPI server at every
setting a user would try, and the bare engine's own rate (the physical limit).

``digits`` (the 8x8 CNN, one JSON digit), ``minilm1`` / ``minilm16`` (``config/minilm.toml``,
one or sixteen sentences a request) and ``resnet50`` (``loadtest.resnet``, seeded weights, one
224x224 image as v2 binary): ``loadtest.compare --workload NAME`` runs InferPool with no flags
beside the peers of ``variants_for(NAME)`` and prints ``limits(NAME)`` above the table;
``python -m loadtest.bench wide`` reuses the table.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferpool.engine.backends.native_bf16 import native_bf16
from inferpool.harness.payloads import IMAGE, PAYLOADS, SENTENCE, SENTENCES, Payload
from inferpool.harness.server import REPO_ROOT, Command, inferpool_serve
from loadtest.apart import run_apart

MINILM = str(REPO_ROOT / "config" / "minilm.toml")


@dataclass
class Variant:
    """One server of a comparison: its name, command (given a port) and request."""

    name: str
    argv: Command
    payload: str = "digits-json"
    ready_path: str = "/health/ready"
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class Workload:
    args: tuple[str, ...]
    """InferPool's flags for it (the model or config: nothing else, the defaults are the point)."""
    payload_name: str
    concurrency: tuple[int, ...]
    items: int
    """Items (images, sentences) per request."""
    source: str
    handler: str | None = None
    peer: str | None = None
    """``loadtest.peers.fastapi_models``' workload serving the same requests (None: digits' own peers)."""
    engine: tuple[tuple[str, Any], ...] = (("backend", "onnxruntime"),)
    """The RuntimeOptions the defaults serve it with (the bare engine's limit runs the same)."""
    others: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Further InferPool variants worth a row: (name, extra flags)."""

    def payload(self) -> Payload:
        return PAYLOADS[self.payload_name]()


MINILM_ENGINE = tuple(tomllib.loads(Path(MINILM).read_text())["runtime"].items())
"""config/minilm.toml's engine settings, read from it (the limit follows whatever it ships)."""
MINILM_OTHERS = (("InferPool onnxruntime fp32", ("--runtime.backend", "onnxruntime", "--runtime.precision", "fp32")),)
"""The previous minilm.toml (fp32 on onnxruntime), beside the shipped one."""

BF16_ENGINE = (("backend", "openvino"), ("precision", "bf16"), ("precision_strict", True))
RESNET_ENGINE = (
    BF16_ENGINE
    if native_bf16(os.environ.get("INFERPOOL_RUNTIME__NATIVE_BF16", "auto"))[0]
    else (("backend", "onnxruntime"),)
)
"""What the defaults serve ResNet-50 with: OpenVINO bf16 where the CPU runs bf16 natively
(``precision = "auto"``: 3.85x fp32 here), else onnxruntime fp32; the server's own override
(``INFERPOOL_RUNTIME__NATIVE_BF16=off``) holds for the limit too."""
MINILM_PLAIN = (
    "--model",
    "inferpool.engine.zoo.minilm:build",
    "--handler",
    "inferpool.engine.zoo.minilm:MiniLMHandler",
)
"""MiniLM with no config file: the defaults choose its backend and precision."""

WORKLOADS = {
    "resnet50": Workload(("--model", "loadtest.resnet:build"), "resnet50-v2-binary", (1, 4, 16), 1,
                         "loadtest.resnet:build", peer="resnet50", engine=RESNET_ENGINE,
                         others=(("InferPool batch8", ("--runtime.max-batch-size", "8")),)),
    "minilm16-plain": Workload(MINILM_PLAIN, "minilm16-json", (1, 4), 16, "inferpool.engine.zoo.minilm:build",
                               "inferpool.engine.zoo.minilm:MiniLMHandler", peer="minilm", engine=MINILM_ENGINE),
    "minilm1-plain": Workload(MINILM_PLAIN, "minilm-json", (1, 8, 32), 1, "inferpool.engine.zoo.minilm:build",
                              "inferpool.engine.zoo.minilm:MiniLMHandler", peer="minilm", engine=MINILM_ENGINE),
    "minilm16": Workload(("--config", MINILM), "minilm16-json", (1, 4), 16, "inferpool.engine.zoo.minilm:build",
                         "inferpool.engine.zoo.minilm:MiniLMHandler", peer="minilm", engine=MINILM_ENGINE,
                         others=MINILM_OTHERS),
    "minilm1": Workload(("--config", MINILM), "minilm-json", (1, 8, 32), 1, "inferpool.engine.zoo.minilm:build",
                        "inferpool.engine.zoo.minilm:MiniLMHandler", peer="minilm", engine=MINILM_ENGINE,
                        others=MINILM_OTHERS),
    "digits": Workload((), "digits-json", (1, 8, 64), 1, "inferpool.engine.zoo.digits:build"),
}  # fmt: skip


def peer_command(workload: str, workers: int, threads: int) -> Command:
    module = "loadtest.peers.fastapi_models"
    extra = ["--workload", workload, "--workers", str(workers), "--threads", str(threads)]
    return lambda port: [sys.executable, "-m", module, "--port", str(port), *extra]


def variants_for(name: str) -> list[Variant]:
    """InferPool with no flags (and in one process), then the FastAPI peer at 1 and 2 processes
    of 1 and 2 torch threads each: its strongest setting is one of them, and which one depends on
    the model (a 20 ms call gains from threads, a 20 µs one only from processes)."""
    workload = WORKLOADS[name]
    payload = workload.payload_name
    found = [
        Variant("InferPool defaults", inferpool_serve(*workload.args), payload),
        Variant("InferPool 1 process", inferpool_serve(*workload.args, "--workers", "1"), payload),
        *(Variant(name, inferpool_serve(*workload.args, *more), payload) for name, more in workload.others),
    ]
    if workload.peer is not None:
        for workers in (1, 2):
            for threads in (1, 2):
                label = f"FastAPI {workers}p x {threads} thread{'s' * (threads > 1)}"
                found.append(Variant(label, peer_command(workload.peer, workers, threads), payload))
    return found


def request_arrays(model: Any, workload: Workload) -> Mapping[str, Any]:
    """The arrays one request's payload becomes (through the handler, for text)."""
    if workload.peer == "resnet50":
        return {"image": IMAGE}
    if model.handler is not None:
        texts = SENTENCES if workload.items > 1 else [SENTENCE]
        return dict(model.handler.preprocess(texts)[0])
    return dict(model.module.examples(1))


def calls_per_second(call: Callable[[], object], seconds: float, threads: int = 1) -> float:
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


class BareEngine:
    """The workload's model with no server around it, on the backend and precision the defaults
    serve it with, in this process: the physical limit, in its two settings."""

    def __init__(self, workload: Workload) -> None:
        from inferpool.engine import RuntimeOptions, ServedModel  # torch: only for the limit
        from inferpool.engine.plan.threads import usable_cpus

        self.cpus = usable_cpus()
        engine = {**dict(workload.engine), "warmup_iters": 1, "lend_idle_cores": "off"}
        wide = RuntimeOptions(**{**engine, "intra_op_threads": self.cpus, "num_runtimes": 1})
        self.wide = ServedModel.load(workload.source, wide, handler=workload.handler)
        self.narrow = ServedModel.load(workload.source, RuntimeOptions(**engine), handler=workload.handler)
        self.arrays = request_arrays(self.wide, workload)

    def one_stream(self, seconds: float) -> float:
        """Requests/s of one stream of calls on a runtime as wide as the machine."""
        return calls_per_second(lambda: self.wide.call(self.arrays), seconds)

    def batched(self, seconds: float, rows: int) -> float:
        """Requests/s of one stream of ``rows``-request batches on the runtime as wide as the machine."""
        batch = self._repeated(rows)
        return rows * calls_per_second(lambda: self.wide.call(batch), seconds)

    def _repeated(self, rows: int) -> Mapping[str, Any]:
        if rows == 1:
            return self.arrays
        return {name: np.ascontiguousarray(np.repeat(a, rows, axis=0)) for name, a in self.arrays.items()}

    def every_core(self, seconds: float, rows: int = 1) -> float:
        """Requests/s with every core busy, a single-thread runtime each, on ``rows``-request batches."""
        batch = self._repeated(rows)
        return rows * calls_per_second(lambda: self.narrow.call(batch), seconds, threads=self.cpus)

    def close(self) -> None:
        self.wide.close()
        self.narrow.close()


def limits(workload: Workload, seconds: float) -> dict[str, Any]:
    """Requests/s of the bare engine (``BareEngine``): one stream on every core, and every core
    busy with single-thread runtimes."""
    bare = BareEngine(workload)
    try:
        one_stream, every_core = bare.one_stream(seconds), bare.every_core(seconds)
    finally:
        bare.close()
    shown = ("backend", "precision")  # what sets the rate; the thread settings are the limit's own
    described = ", ".join(str(value) for key, value in workload.engine if key in shown)
    return {"one_stream": round(one_stream, 1), "every_core": round(every_core, 1), "engine": described}


def limits_apart(name: str, seconds: float) -> dict[str, Any]:
    """``limits(WORKLOADS[name], seconds)`` in a child process (loadtest/apart.py), so that the
    process that goes on to measure servers never maps torch's libraries."""
    return run_apart(_limits_of, name, seconds)


def _limits_of(name: str, seconds: float) -> dict[str, Any]:
    return limits(WORKLOADS[name], seconds)
