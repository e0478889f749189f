"""precision = "auto": the chooser on fake backends (the gate, the speed rule, the CPU, explicit
settings, the cache), and a real model whose bf16 answers drift, refused on OpenVINO."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch

from inferpool.engine import BACKENDS, InferenceModule, RuntimeOptions
from inferpool.engine.backends import precision_auto
from inferpool.engine.backends.autoselect import resolve_backend
from inferpool.engine.backends.eager import EagerRuntime
from inferpool.engine.backends.native_bf16 import native_bf16
from inferpool.engine.backends.precision_choice import precision_choice
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.schema import Array

REDUCED_COMPILES: Counter[str] = Counter()


class SlowFp32(EagerRuntime):
    """The fp32 winner: eager's answers, a call long enough (3 ms) for bf16 to be worth trying."""

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        time.sleep(0.003)
        return super().run(inputs)


class FakeBf16(EagerRuntime):
    """A bf16 candidate: eager's answers, three times as fast as the fp32 winner."""

    seconds = 0.001

    @classmethod
    def compile_reduced(cls, module: InferenceModule, options: RuntimeOptions, precision: str) -> object:
        REDUCED_COMPILES[cls.__name__] += 1
        return None

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        time.sleep(self.seconds)
        return super().run(inputs)


class DriftingBf16(FakeBf16):
    """Fast, and wrong: every float output's classes shifted by one."""

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        return {
            n: np.roll(a, 1, axis=-1) if a.dtype.kind == "f" else (a + 1) % 10 for n, a in super().run(inputs).items()
        }


class NotFasterBf16(FakeBf16):
    seconds = 0.003


@pytest.fixture
def fake_bf16(monkeypatch):
    def use(candidate: type[FakeBf16]) -> None:
        monkeypatch.setitem(BACKENDS, "fake_bf16", candidate)
        monkeypatch.setitem(precision_auto.CANDIDATES, "bf16", "fake_bf16")

    monkeypatch.setitem(BACKENDS, "slow_fp32", SlowFp32)
    REDUCED_COMPILES.clear()
    return use


def auto(tmp_path: Any, **more: Any) -> RuntimeOptions:
    settings: dict[str, Any] = {
        "native_bf16": "on",
        "compile_cache_dir": str(tmp_path),
        "auto_backends": ("slow_fp32",),
    }
    return RuntimeOptions(backend="auto", warmup_iters=1, **(settings | more))


def test_bf16_that_passes_the_gate_and_is_faster_serves(digits_module, fake_bf16, tmp_path) -> None:
    fake_bf16(FakeBf16)
    choice = resolve_backend(digits_module, auto(tmp_path))
    assert (choice.name, choice.backend) == ("fake_bf16", FakeBf16)
    assert [t.backend for t in choice.trials] == ["slow_fp32", "fake_bf16 bf16"]
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "bf16"
    assert verdict.gate is not None
    assert verdict.gate.passed
    assert verdict.call_ms["fp32"] / verdict.call_ms["bf16"] >= precision_auto.MIN_SPEEDUP
    assert "only synthetic inputs" not in verdict.reason  # digits carries its own held-out images
    assert verdict.report()["served"] == "bf16"


def test_the_gate_failing_serves_fp32_and_says_why(digits_module, fake_bf16, tmp_path) -> None:
    fake_bf16(DriftingBf16)
    choice = resolve_backend(digits_module, auto(tmp_path))
    assert choice.name == "slow_fp32"
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "fp32"
    assert "fails the accuracy gate" in verdict.reason
    assert verdict.gate is not None
    assert not verdict.gate.passed


def test_bf16_not_faster_serves_fp32(digits_module, fake_bf16, tmp_path) -> None:
    fake_bf16(NotFasterBf16)
    choice = resolve_backend(digits_module, auto(tmp_path))
    assert choice.name == "slow_fp32"
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "fp32"
    assert f"under {precision_auto.MIN_SPEEDUP}x" in verdict.reason


def test_no_native_bf16_never_tries_it(digits_module, fake_bf16, tmp_path) -> None:
    fake_bf16(FakeBf16)
    choice = resolve_backend(digits_module, auto(tmp_path, native_bf16="off"))
    assert choice.name == "slow_fp32"
    assert REDUCED_COMPILES["FakeBf16"] == 0
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "fp32"
    assert "bf16 is not tried" in verdict.reason


def test_a_short_fp32_call_never_pays_for_bf16(digits_module, fake_bf16, tmp_path) -> None:
    fake_bf16(FakeBf16)
    options = auto(tmp_path, auto_backends=("eager",))  # the digits CNN's 20-odd microseconds
    assert resolve_backend(digits_module, options).name == "eager"
    assert REDUCED_COMPILES["FakeBf16"] == 0
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "fp32"
    assert "under 1 ms" in verdict.reason


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_explicit_precision_wins(digits_module, fake_bf16, tmp_path, precision) -> None:
    fake_bf16(FakeBf16)
    backend = {"fp32": "slow_fp32", "bf16": "openvino"}[precision]
    options = RuntimeOptions(backend=backend, precision=precision, native_bf16="on", compile_cache_dir=str(tmp_path))
    assert precision_auto.choose_precision(digits_module, options, backend, lambda: pytest.fail("built"), 5e3) is None
    assert REDUCED_COMPILES["FakeBf16"] == 0


def test_a_named_backend_without_bf16_serves_fp32(digits_module, fake_bf16, tmp_path) -> None:
    fake_bf16(FakeBf16)
    options = RuntimeOptions(backend="slow_fp32", native_bf16="on", compile_cache_dir=str(tmp_path), warmup_iters=1)
    assert resolve_backend(digits_module, options).name == "slow_fp32"
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "fp32"
    assert "runs no bf16" in verdict.reason


def test_the_cached_verdict_is_reused_without_gating_or_timing(digits_module, fake_bf16, tmp_path, monkeypatch) -> None:
    fake_bf16(FakeBf16)
    first = resolve_backend(digits_module, auto(tmp_path))
    assert first.name == "fake_bf16"
    assert not precision_choice(digits_module).cached  # type: ignore[union-attr]
    monkeypatch.setattr(precision_auto, "_measure", lambda *args: pytest.fail("gated and timed again"))
    again = resolve_backend(digits_module, auto(tmp_path))
    verdict = precision_choice(digits_module)
    assert again.name == "fake_bf16"
    assert verdict is not None
    assert verdict.cached
    assert verdict.served == "bf16"


def test_a_cached_verdict_meets_todays_rules(digits_module, fake_bf16, tmp_path, monkeypatch) -> None:
    """The rules apply to the cached figures at every start; a verdict that now serves fp32
    compiles nothing."""
    fake_bf16(FakeBf16)
    resolve_backend(digits_module, auto(tmp_path))
    REDUCED_COMPILES.clear()
    monkeypatch.setattr(precision_auto, "_measure", lambda *args: pytest.fail("gated and timed again"))
    monkeypatch.setattr(precision_auto, "MIN_SPEEDUP", 100.0)
    choice = resolve_backend(digits_module, auto(tmp_path))
    verdict = precision_choice(digits_module)
    assert choice.name == "slow_fp32"
    assert verdict is not None
    assert verdict.cached
    assert verdict.served == "fp32"
    assert "under 100.0x" in verdict.reason
    assert REDUCED_COMPILES["FakeBf16"] == 0


def test_native_bf16_reads_the_cpu_flags() -> None:
    assert native_bf16("auto", frozenset({"avx2", "amx_bf16"})) == (True, "the CPU has amx_bf16")
    assert native_bf16("auto", frozenset({"avx2", "avx512f"}))[0] is False
    assert native_bf16("off", frozenset({"amx_bf16"})) == (False, "runtime.native_bf16 is 'off'")
    assert native_bf16("on", frozenset()) == (True, "runtime.native_bf16 is 'on'")


class NearlyCancels(torch.nn.Module):
    """The difference of two layers whose weights differ by 0.1 %: exact in fp32, noise in bf16,
    whose 8 bits of mantissa round both layers' weights to the same values."""

    def __init__(self) -> None:
        super().__init__()
        self.one = torch.nn.Linear(512, 256, bias=False)
        self.other = torch.nn.Linear(512, 256, bias=False)
        with torch.no_grad():
            self.other.weight.copy_(self.one.weight * 1.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.one(x) - self.other(x)) * 1000.0


def test_a_model_whose_bf16_answers_drift_is_served_in_fp32(tmp_path, monkeypatch) -> None:
    """On openvino for real: wherever the CPU runs bf16 the gate refuses it; elsewhere openvino
    runs f32 under the bf16 hint and the speed rule refuses it. fp32 serves either way."""
    monkeypatch.setattr(precision_auto, "MIN_CALL_SECONDS", 0.0)
    torch.manual_seed(0)
    spec = ModelSpec(NearlyCancels().eval(), {"x": torch.randn(4, 512)}, ("y",), name="nearly_cancels")
    module = InferenceModule.from_spec(spec)
    options = RuntimeOptions(backend="auto", auto_backends=("eager",), native_bf16="on", warmup_iters=1,
                             compile_cache_dir=str(tmp_path))  # fmt: skip
    choice = resolve_backend(module, options)
    verdict = precision_choice(module)
    assert choice.name == "eager"
    assert verdict is not None
    assert verdict.served == "fp32", verdict
    assert verdict.gate is not None, verdict
    if native_bf16()[0]:
        assert not verdict.gate.passed, verdict.reason
        assert "fails the accuracy gate" in verdict.reason
        assert verdict.gate.figures.min_cosine is not None
        assert verdict.gate.figures.min_cosine < 0.99


def test_the_digits_model_never_imports_openvino(tmp_path) -> None:
    """Its 20 µs call cannot gain from bf16, so serving it pays nothing for openvino (core since
    precision auto): no import, no compile, on every CPU."""
    script = (
        "import sys\n"
        "from inferpool.engine import RuntimeOptions, ServedModel\n"
        f"options = RuntimeOptions(native_bf16='on', warmup_iters=1, compile_cache_dir={str(tmp_path)!r})\n"
        "served = ServedModel.load('inferpool.engine.zoo.digits:build', options)\n"
        "print(served.info.precision_selection['served'], 'openvino' in sys.modules)\n"
        "served.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["fp32", "False"], done.stdout


def test_without_openvino_installed_fp32_serves(digits_module, fake_bf16, tmp_path, monkeypatch) -> None:
    fake_bf16(FakeBf16)

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert resolve_backend(digits_module, auto(tmp_path)).name == "slow_fp32"
    verdict = precision_choice(digits_module)
    assert verdict is not None
    assert verdict.served == "fp32"
    assert "is not installed" in verdict.reason
