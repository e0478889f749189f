"""MiniLM's export on onnxruntime fp32, OpenVINO f32 and OpenVINO bf16, bare (no server):
items/s per batch and thread count, rounds interleaved, and bf16's cosine to fp32.

    python -m loadtest.bench_bf16 [--rounds 5] [--seconds 0.5]

The export is the onnxruntime backend's cached one (made on first use). OpenVINO runs as the
openvino backend compiles it (one stream, no pinning), with the precision hint at f32 or bf16.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from inferpool.engine import InferenceModule, RuntimeOptions
from inferpool.engine.backends.onnxruntime.export import ensure_export
from inferpool.engine.backends.openvino import compile_config, core
from inferpool.engine.zoo import minilm
from inferpool.harness.payloads import SENTENCE, SENTENCES

Call = Callable[[dict[str, np.ndarray]], np.ndarray]
SHAPES = ((1, 1), (16, 1), (16, 2), (1, 2))


def onnxruntime(path: Path, threads: int) -> Call:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def openvino(path: Path, threads: int, precision: str) -> Call:
    compiled = core().compile_model(str(path), "CPU", compile_config(1, threads, precision))
    request = compiled.create_infer_request()
    return lambda feeds: np.asarray(request.infer(feeds)[compiled.output(0)])


def rate(call: Call, feeds: dict[str, np.ndarray], items: int, seconds: float) -> float:
    call(feeds)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        call(feeds)
        count += 1
    return count * items / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args()
    module = InferenceModule.from_spec(minilm.build())
    exported = ensure_export(module, RuntimeOptions(backend="onnxruntime"))
    assert isinstance(exported.model, Path), "the export cache must be writable"
    path = exported.model
    handler = minilm.MiniLMHandler()
    for items, threads in SHAPES:
        feeds = dict(handler.preprocess(SENTENCES[:items] if items > 1 else [SENTENCE])[0])
        calls = {
            "onnxruntime fp32": onnxruntime(path, threads),
            "openvino f32": openvino(path, threads, "fp32"),
            "openvino bf16": openvino(path, threads, "bf16"),
        }
        rates: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                rates[name].append(rate(call, feeds, items, args.seconds))
        fp32, bf16 = calls["onnxruntime fp32"](feeds), calls["openvino bf16"](feeds)
        cosine = np.sum(fp32 * bf16, axis=1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(bf16, axis=1))
        medians = ", ".join(f"{name} {statistics.median(r):.1f}" for name, r in rates.items())
        print(f"batch {items}, {threads} thread(s): {medians} items/s; bf16 min cosine {cosine.min():.5f}", flush=True)


if __name__ == "__main__":
    main()
