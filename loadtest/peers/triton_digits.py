"""Triton Inference Server 2.51 serving the digits CNN, for loadtest.compare (issue 57's anchor).

Runs in a venv of its own, never the product's (``make .venv-triton`` makes it: the
``nvidia-pytriton`` 0.7.0 wheel, which ships the C++ ``tritonserver`` 2.51 and its Python
backend, numpy < 2 for the backend's stub, and onnxruntime):

    PYTHONPATH=. .venv-triton/bin/python loadtest/peers/triton_digits.py --port 8003 --onnx DIGITS.onnx \\
        [--instances 2] [--max-batch-size 64] [--max-queue-delay-us 0]

``--onnx`` is InferPool's own cached export of the digits CNN (``loadtest.peers.bare_handler``'s
``export()``, which loadtest.compare calls in its own venv): same weights, same exporter. This
script only lays out a model repository (in a folder of the temp dir named by the settings,
reused) and becomes the wheel's ``tritonserver`` (``execve``: the tree measured is Triton's own,
the server and its stubs): the C++ server parses HTTP and JSON and batches requests (dynamic
batching), and its Python backend runs ``--instances`` stub processes, each with the model of
``loadtest/peers/triton_model.py`` (onnxruntime, one intra-op thread) inside it. It answers
``POST /v2/models/digits/infer`` with InferPool's v2 JSON body. gRPC and metrics are off; nothing
here imports torch or InferPool (nor pytriton's Python: only its files are used).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from loadtest.peers.triton_model import ONNX_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.find_spec("pytriton")
PYTRITON = Path(next(iter(SPEC.submodule_search_locations or ()))) if SPEC else Path("pytriton-is-not-installed")
"""The wheel's files (the server, the Python backend, the stubs), found without importing it."""
MODEL_PY = "from loadtest.peers.triton_model import TritonPythonModel  # noqa: F401\n"
CONFIG = """name: "digits"
backend: "python"
max_batch_size: {max_batch_size}
input [{{ name: "image", data_type: TYPE_FP32, dims: [1, 8, 8] }}]
output [
  {{ name: "probabilities", data_type: TYPE_FP32, dims: [10] }},
  {{ name: "label", data_type: TYPE_INT64, dims: [1] }}
]
instance_group [{{ count: {instances}, kind: KIND_CPU }}]
dynamic_batching {{ max_queue_delay_microseconds: {max_queue_delay_us} }}
"""


def lay_out(folder: Path, args: argparse.Namespace) -> None:
    """The model repository and the backend directory (the wheel's Python backend with the stub
    built for this interpreter's version, as pytriton lays it out)."""
    model = folder / "models" / "digits"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "1" / "model.py").write_text(MODEL_PY)
    (model / "config.pbtxt").write_text(CONFIG.format(**vars(args)))
    server = PYTRITON / "tritonserver"
    shutil.copytree(server / "backends", folder / "backends", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)  # fmt: skip
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = "triton_python_backend_stub"
    shutil.copy(server / "python_backend_stubs" / version / stub, folder / "backends" / "python" / stub)


def server_environment(onnx: str) -> dict[str, str]:
    """The stub links ``libpython3.X.so.1.0`` by name, so the loader would find the system's
    (Debian's 3.11.2 here) while the standard library it runs is this interpreter's (3.11.7): the two
    disagree and the stub dies at start (``'_thread.RLock' object has no attribute
    '_recursion_count'``). This interpreter's library directory goes first, then the wheel's own
    libraries. The embedded interpreter finds its packages from the ``python`` it finds first on
    ``PATH`` (as pytriton sets it up): this venv's; the checkout (the model's module) joins ``PYTHONPATH``."""
    wheel_libs = PYTRITON.parent / "nvidia_pytriton.libs"
    libdir = sysconfig.get_config_var("LIBDIR") if sysconfig.get_config_var("Py_ENABLE_SHARED") else None
    libraries = [libdir, str(wheel_libs), os.environ.get("LD_LIBRARY_PATH")]
    imports = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    return {
        **os.environ,
        "PATH": os.pathsep.join(filter(None, [str(Path(sys.executable).parent), os.environ.get("PATH")])),
        "LD_LIBRARY_PATH": os.pathsep.join(filter(None, libraries)),
        "PYTHONPATH": os.pathsep.join(filter(None, imports)),
        ONNX_ENV: onnx,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--onnx", required=True, help="InferPool's ONNX export of the digits CNN")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--max-queue-delay-us", type=int, default=0, help="0: Triton's default")
    args = parser.parse_args()
    settings = f"{args.instances}-{args.max_batch_size}-{args.max_queue_delay_us}"
    folder = Path(tempfile.gettempdir()) / f"inferpool-triton-digits-{settings}"
    lay_out(folder, args)
    binary = str(PYTRITON / "tritonserver" / "bin" / "tritonserver")
    argv = [binary, f"--model-repository={folder / 'models'}", f"--backend-directory={folder / 'backends'}",
            "--http-address=127.0.0.1", f"--http-port={args.port}", "--allow-grpc=false", "--allow-metrics=false",
            "--log-verbose=0"]  # fmt: skip
    os.execve(binary, argv, server_environment(os.path.abspath(args.onnx)))


if __name__ == "__main__":
    main()
