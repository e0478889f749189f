"""Triton Inference Server 2.51 serving the digits CNN, for loadtest.compare (issue 57's anchor).

Runs in a venv of its own, never the product's (``make .venv-triton`` makes it: the
``nvidia-pytriton`` 0.7.0 wheel, which ships the C++ ``tritonserver`` 2.51 and its Python
backend, numpy < 2 for the backend's stub, and onnxruntime):

    PYTHONPATH=. .venv-triton/bin/python loadtest/peers/triton_digits.py --port 8003 --onnx DIGITS.onnx \\
        [--instances 2] [--max-batch-size 64] [--max-queue-delay-us 0]

``--onnx`` is InferPool's own cached export of the digits CNN (``loadtest.peers.bare_handler``'s
``export()``, which loadtest.compare calls in its own venv): same weights, same exporter. The C++
server parses HTTP and JSON and batches requests (dynamic batching); pytriton's Python backend
hands each batch to one of ``--instances`` model instances, each an onnxruntime session on one
intra-op thread with the serving options of ``engine/backends/onnxruntime/runtime.py``. The
model answers ``POST /v2/models/digits/infer`` with InferPool's v2 JSON body (input ``image``,
FP32 ``[1, 1, 8, 8]``) and returns ``probabilities`` ``[1, 10]`` and ``label`` ``[1, 1]`` (Triton
wants one dimension per batched sample; InferPool's ``label`` is ``[1]``). gRPC and the metrics
port are on free ports of 127.0.0.1; nothing here imports torch or InferPool.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sysconfig
from collections.abc import Callable
from typing import Any

import numpy as np
from pytriton.decorators import batch  # type: ignore[import-not-found]
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # type: ignore[import-not-found]
from pytriton.triton import Triton, TritonConfig  # type: ignore[import-not-found]

from loadtest.peers.onnx_session import session


def instance(path: str) -> Callable[..., dict[str, np.ndarray]]:
    """One model instance: its own session, called with a whole batch of images."""
    model = session(path)
    input_name = model.get_inputs()[0].name

    @batch  # type: ignore[untyped-decorator]
    def infer(image: np.ndarray) -> dict[str, np.ndarray]:
        probabilities, label = model.run(["probabilities", "label"], {input_name: image.astype(np.float32)})
        return {"probabilities": probabilities, "label": label.reshape(-1, 1)}

    return infer  # type: ignore[no-any-return]


def stub_links_this_python() -> None:
    """The backend's stub links ``libpython3.X.so.1.0`` by name, so the loader finds the system's
    (Debian's 3.11.2 here) while the standard library it runs is this interpreter's (3.11.7): the
    two disagree and the stub dies at start (``'_thread.RLock' object has no attribute
    '_recursion_count'`` in multiprocessing). tritonserver and its stubs inherit this environment:
    this interpreter's own library directory goes first."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")]))


def stop_on_sigterm() -> None:
    """SIGTERM (the launcher's stop) unwinds as Ctrl-C does, so that pytriton stops tritonserver and
    removes its workspace (~30 MB under ~/.cache/pytriton, a copy of the server) instead of leaving it."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--onnx", required=True, help="InferPool's ONNX export of the digits CNN")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--max-queue-delay-us", type=int, default=0, help="0: Triton's default")
    args = parser.parse_args()
    stub_links_this_python()
    stop_on_sigterm()
    config = TritonConfig(
        http_address="127.0.0.1", http_port=args.port, grpc_address="127.0.0.1", grpc_port=free_port(),
        metrics_address="127.0.0.1", metrics_port=free_port(), log_verbose=0,
    )  # fmt: skip
    batcher: Any = DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)
    with Triton(config=config) as triton:
        triton.bind(
            model_name="digits",
            infer_func=[instance(args.onnx) for _ in range(args.instances)],
            inputs=[Tensor(name="image", dtype=np.float32, shape=(1, 8, 8))],
            outputs=[
                Tensor(name="probabilities", dtype=np.float32, shape=(10,)),
                Tensor(name="label", dtype=np.int64, shape=(1,)),
            ],
            config=ModelConfig(max_batch_size=args.max_batch_size, batcher=batcher),
            strict=False,  # pytriton 0.7.0 rejects int64 outputs as not numpy.int64 when strict
        )
        triton.serve()


if __name__ == "__main__":
    main()
