"""The aoti backend against eager on the MLP: real AOTInductor compiles (one module-scoped
cache: batch sizes 1 and 4 with the minimal ArrayRef interface, batch 1 with the loader)."""

from __future__ import annotations

import asyncio
import ctypes
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from inferpool.engine import (
    BACKENDS,
    InferenceModule,
    InvalidInput,
    ModelLoadError,
    ModelSpec,
    RuntimeOptions,
    ServedModel,
)
from inferpool.engine.backends import AotiInterface
from inferpool.engine.backends.aoti import AotiRuntime
from inferpool.engine.backends.aoti import compile as aoti_compile
from inferpool.engine.backends.aoti.abi import DTYPE_CODES, AotiError, ArrayRefTensor, describe
from inferpool.engine.backends.aoti.runners import INTERFACES, MinimalArrayrefCaller
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.zoo.mlp import build

# Inductor's frozen mkldnn kernels vs eager's: equal to float rounding, not bitwise.
RTOL, ATOL = 1e-4, 1e-5
SIZES = (1, 4)


@pytest.fixture(scope="module")
def mlp() -> InferenceModule:
    return InferenceModule.from_spec(build())


@pytest.fixture(scope="module")
def compiles():
    """Counts real compiles: every call of aoti_compile.compile_package is recorded."""
    calls: list[Path] = []
    real = aoti_compile.compile_package

    def counting(program, path, *, interface):
        calls.append(path)
        real(program, path, interface=interface)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aoti_compile, "compile_package", counting)
        yield calls


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("aoti-cache")


def options(cache: Path, **changes) -> RuntimeOptions:
    return RuntimeOptions(
        **{"backend": "aoti", "compiled_batch_sizes": SIZES, "compile_cache_dir": str(cache), **changes}
    )


@pytest.fixture(scope="module")
def artifact(mlp, cache, compiles):
    compiled = AotiRuntime.compile(mlp, options(cache))
    assert len(compiles) == len(SIZES)  # a fresh cache: one compile per batch size
    return compiled


@pytest.fixture(scope="module")
def loader_artifact(mlp, cache, compiles):
    return AotiRuntime.compile(mlp, options(cache, aoti_interface="loader", compiled_batch_sizes=(1,)))


def eager(mlp: InferenceModule, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return mlp.module(torch.from_numpy(x)).numpy()


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


def test_registered_and_every_interface_has_a_loader_and_configs():
    assert BACKENDS["aoti"] is AotiRuntime
    assert set(INTERFACES) == set(aoti_compile.INDUCTOR_CONFIGS) == set(AotiInterface)


def test_bad_interface_is_refused_with_a_fix():
    with pytest.raises(ValueError, match="aoti_interface='ctypes' is invalid: use one of"):
        RuntimeOptions(aoti_interface="ctypes")
    with pytest.raises(ValueError, match="compiled_batch_sizes"):
        RuntimeOptions(compiled_batch_sizes=(0, 8))


def test_struct_layout_matches_interface_h():
    # Offsets from torch/csrc/inductor/aoti_runtime/interface.h (static_assert: 192 bytes).
    offsets = {"data": 0, "numel": 8, "sizes": 16, "strides": 80, "ndim": 144, "dtype": 148}
    offsets |= {"device_type": 152, "device_idx": 156, "reserved": 160}
    assert {name: getattr(ArrayRefTensor, name).offset for name in offsets} == offsets
    assert ctypes.sizeof(ArrayRefTensor) == 192
    assert DTYPE_CODES[np.dtype("float32")] == 6
    assert DTYPE_CODES[np.dtype("int64")] == 4


@pytest.mark.parametrize("n", [1, 3, 4, 9])
def test_matches_eager_at_every_routed_size(mlp, artifact, n):
    x = rows(n, seed=n)
    got = AotiRuntime(mlp, options(Path()), artifact).run({"x": x})["logits"]
    assert got.shape == (n, 10)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, eager(mlp, x), rtol=RTOL, atol=ATOL)


def test_loader_interface_matches_eager(mlp, loader_artifact):
    runtime = AotiRuntime(mlp, options(Path(), aoti_interface="loader", compiled_batch_sizes=(1,)), loader_artifact)
    x = rows(3, seed=7)  # three calls at the only compiled size
    np.testing.assert_allclose(runtime.run({"x": x})["logits"], eager(mlp, x), rtol=RTOL, atol=ATOL)


def test_routes_to_compiled_sizes_only(mlp, artifact):
    runtime = AotiRuntime(mlp, options(Path()), artifact)
    assert runtime.route(1) == [(0, 1, 1)]
    assert runtime.route(2) == [(0, 2, 4)]
    assert runtime.route(9) == [(0, 4, 4), (4, 8, 4), (8, 9, 1)]
    seen: list[tuple[int, ...]] = []

    class Spy:
        """Records the shape the library is told, and that it points at the runtime's buffer."""

        def __init__(self, call: MinimalArrayrefCaller) -> None:
            self.call, self.inputs = call, call.inputs

        def __call__(self) -> list[np.ndarray]:
            desc = self.call._in[0]
            assert desc.data == self.inputs[0].ctypes.data
            seen.append(tuple(desc.sizes[: desc.ndim]))
            return self.call()

    runtime._callers = {size: Spy(call) for size, call in runtime._callers.items()}  # type: ignore[arg-type]
    for n in (1, 2, 3, 5, 11):
        runtime.run({"x": rows(n)})
    assert set(seen) == {(1, 64), (4, 64)}


def test_shape_it_was_not_compiled_for_is_rejected(mlp, artifact):
    runtime = AotiRuntime(mlp, options(Path()), artifact)
    with pytest.raises(InvalidInput, match=r"does not fit the compiled \[4, 64\]"):
        runtime.run({"x": np.zeros((3, 32), np.float32)})
    with pytest.raises(InvalidInput, match="float64"):
        runtime.run({"x": np.zeros((4, 64), np.float64)})


def test_library_numel_check_is_a_clear_error(artifact):
    caller = artifact.shared[4].caller()
    half = np.zeros((2, 64), np.float32)
    describe(half, caller._in[0])  # as if the descriptor had been built for another batch size
    with pytest.raises(AotiError, match=r"incorrect numel for input tensor\. expected 256, got 128"):
        caller()


def test_outputs_do_not_alias_library_storage(mlp, artifact):
    runtime = AotiRuntime(mlp, options(Path()), artifact)
    first = runtime.run({"x": rows(1, seed=1)})["logits"].copy()
    kept = runtime.run({"x": rows(1, seed=1)})["logits"]
    runtime.run({"x": rows(1, seed=2)})  # the library reuses its thread-local output storage
    np.testing.assert_array_equal(kept, first)


def test_four_threads_share_one_module(mlp, artifact):
    runtimes = [AotiRuntime(mlp, options(Path()), artifact) for _ in range(4)]
    inputs = [rows(1 + (i % 6), seed=i) for i in range(200)]
    expected = [eager(mlp, x) for x in inputs]
    failures: list[str] = []

    def work(runtime: AotiRuntime, offset: int) -> None:
        for i in range(offset, len(inputs), 4):
            got = runtime.run({"x": inputs[i]})["logits"]
            if not np.allclose(got, expected[i], rtol=RTOL, atol=ATOL):
                failures.append(f"request {i}")

    threads = [threading.Thread(target=work, args=(r, k)) for k, r in enumerate(runtimes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sum(r.calls for r in runtimes) == len(inputs)


def test_second_start_does_not_compile(mlp, cache, artifact, compiles, monkeypatch):
    before = {p: p.stat().st_mtime_ns for p in cache.glob("*.pt2")}

    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the package is cached")

    monkeypatch.setattr(aoti_compile, "compile_package", refuse)
    again = AotiRuntime.compile(mlp, options(cache))
    assert all(p.compile_seconds is None for p in again.packages.values())
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.pt2")} == before
    assert [p.path for p in again.packages.values()] == [p.path for p in artifact.packages.values()]


def test_cache_key_follows_the_weights(mlp):
    program = aoti_compile.export_at(mlp, 1)
    key = aoti_compile.program_key(program, 1, "minimal_arrayref")
    assert key == aoti_compile.program_key(aoti_compile.export_at(mlp, 1), 1, "minimal_arrayref")
    assert key != aoti_compile.program_key(program, 1, "loader")
    changed = build()
    with torch.no_grad():
        changed.module.get_parameter("layers.0.bias")[0] += 1
    other = aoti_compile.export_at(InferenceModule.from_spec(changed), 1)
    assert aoti_compile.program_key(other, 1, "minimal_arrayref") != key


def _damaged_cache(cache: Path, artifact, tmp_path: Path, damage) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    damage(copy / artifact.packages[1].path.name)
    return copy


def _truncate_library(package: Path) -> None:
    """A valid archive whose compiled library is cut short (a torn copy of the .so alone)."""
    with zipfile.ZipFile(package) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(package, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data[: len(data) // 3] if name.endswith(".so") else data)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), id="truncated"),
        pytest.param(lambda p: p.write_bytes(b"not a zip file" * 100), id="garbage"),
        pytest.param(_truncate_library, id="truncated-library"),
    ],
)
def test_corrupt_package_is_a_model_load_error(mlp, cache, artifact, tmp_path, damage, monkeypatch):
    monkeypatch.setattr(aoti_compile, "compile_package", None)  # must not be reached
    damaged = _damaged_cache(cache, artifact, tmp_path, damage)
    with pytest.raises(
        ModelLoadError, match=f"cannot load AOTInductor package .*{artifact.packages[1].path.name}.*delete"
    ):
        AotiRuntime.compile(mlp, options(damaged))


def test_mismatched_package_is_a_model_load_error(mlp, cache, artifact, tmp_path, monkeypatch):
    monkeypatch.setattr(aoti_compile, "compile_package", None)
    batch4 = artifact.packages[4].path
    damaged = _damaged_cache(cache, artifact, tmp_path, lambda p: shutil.copyfile(batch4, p))
    with pytest.raises(ModelLoadError, match=r"fails on inputs for 'mlp'.*incorrect numel.*delete"):
        AotiRuntime.compile(mlp, options(damaged))


def test_dynamic_non_batch_dims_are_refused_at_compile(tmp_path):
    spec = ModelSpec(torch.nn.Identity(), {"x": torch.zeros(1, 8)}, name="seq", dynamic_dims={"x": (1,)})
    with pytest.raises(ModelLoadError, match="dynamic non-batch dimension"):
        AotiRuntime.compile(InferenceModule.from_spec(spec), options(tmp_path))


def test_served_model_finds_the_cached_packages(mlp, cache, artifact, compiles):
    before = len(compiles)
    plan = ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1)
    served = ServedModel(mlp, options(cache, warmup_iters=1), plan, max_queue=8)
    try:
        x = rows(3, seed=11)
        prediction = asyncio.run(served.infer({"x": x}))
        np.testing.assert_allclose(prediction.outputs["logits"], eager(mlp, x), rtol=RTOL, atol=ATOL)
    finally:
        served.close()
    assert len(compiles) == before


def test_truncated_library_with_the_loader_is_a_model_load_error(mlp, cache, loader_artifact, tmp_path, monkeypatch):
    monkeypatch.setattr(aoti_compile, "compile_package", None)
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    _truncate_library(copy / loader_artifact.packages[1].path.name)
    with pytest.raises(ModelLoadError, match="compiled library is truncated"):
        AotiRuntime.compile(mlp, options(copy, aoti_interface="loader", compiled_batch_sizes=(1,)))


def test_package_of_another_model_with_the_same_shapes_is_a_model_load_error(mlp, cache, artifact, tmp_path):
    changed = build()
    with torch.no_grad():
        changed.module.get_parameter("layers.2.weight").mul_(2)
    other = aoti_compile.ensure_packages(
        InferenceModule.from_spec(changed), options(tmp_path / "other", compiled_batch_sizes=(1,))
    )
    damaged = _damaged_cache(cache, artifact, tmp_path, lambda p: shutil.copyfile(other[0].path, p))
    with pytest.raises(ModelLoadError, match=r"disagrees with the eager model 'mlp' on output 'logits'.*delete"):
        AotiRuntime.compile(mlp, options(damaged))
