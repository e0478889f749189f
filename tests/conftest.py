from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from inferpool.engine import InferenceModule, RuntimeOptions
from inferpool.engine.plan.threads import ThreadPlan, apply_thread_plan
from inferpool.engine.zoo.digits import build

# Servers the tests start (in process, or as subprocesses, which inherit this) leave gRPC off
# unless a test asks for it with --grpc-port: several run at once, and its default is one port.
os.environ.setdefault("INFERPOOL_GRPC_PORT", "0")


@pytest.fixture(scope="session", autouse=True)
def _serving_thread_settings() -> None:
    # As the service does: 1 intra-op thread per runtime. torch's default (one per core) in
    # each of several threads makes OpenMP teams spin against each other, ~30x slower here.
    apply_thread_plan(ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1))


@pytest.fixture(scope="session")
def digits_module() -> InferenceModule:
    return InferenceModule.from_spec(build())


@pytest.fixture(scope="session")
def reference():
    """Eager PyTorch on a separately built copy of the model: the numbers to match."""
    model = build().module.eval()

    def run(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            probabilities, label = model(torch.from_numpy(np.asarray(images, dtype=np.float32)))
        return probabilities.numpy(), label.numpy()

    return run


@pytest.fixture
def images() -> np.ndarray:
    """Deterministic digit-like images: 16 samples of [1, 8, 8] in 0..16."""
    return np.random.default_rng(0).integers(0, 17, size=(16, 1, 8, 8)).astype(np.float32)


@pytest.fixture
def options() -> RuntimeOptions:
    # Pinned (the defaults measure and may choose inline or another backend): these tests are
    # about the worker-thread machinery and compare with eager to float rounding.
    return RuntimeOptions(backend="eager", dispatch="threads", num_runtimes=2, warmup_iters=1)


@pytest.fixture
def digits_pt2(tmp_path):
    """The digits CNN exported with torch.export (dynamic batch 1..256) and saved as a .pt2."""
    program = torch.export.export(
        build().module.eval(),
        (torch.zeros(2, 1, 8, 8),),
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=256)},),
    )
    path = tmp_path / "digits.pt2"
    torch.export.save(program, path)
    return path
