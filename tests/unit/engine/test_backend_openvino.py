from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions, ServedModel, load_model
from inferpool.engine.backends.openvino import CompiledOpenVino, OpenVinoRuntime, probe_apart
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.zoo.digits import build as build_digits
from inferpool.engine.zoo.mlp import build as build_mlp
from tests.support.backend_checks import check_digits, hide_package, mapped

openvino = pytest.importorskip("openvino")
pytest.importorskip("onnxscript")

# OpenVINO's kernels differ from PyTorch's (fused, reordered, other blockings): float rounding.
RTOL, ATOL = 1e-4, 1e-6


@pytest.fixture(scope="module")
def compiled(digits_module):
    return OpenVinoRuntime.compile(digits_module, RuntimeOptions(intra_op_threads=1))


def check(got, images, reference):
    check_digits(got, images, reference, RTOL, ATOL)


def test_registered_by_name():
    assert BACKENDS["openvino"] is OpenVinoRuntime


def test_compiles_in_f32_with_one_stream_per_runtime(digits_module, compiled):
    assert (compiled.streams, compiled.threads_per_stream) == (1, 1)
    # bf16 is the plugin's default on CPUs that have it, and would not be the model's answers.
    assert compiled.model.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
    two = OpenVinoRuntime.compile(digits_module, RuntimeOptions(num_runtimes=2))
    assert (two.streams, int(two.model.get_property("NUM_STREAMS"))) == (2, 2)


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_matches_eager_reference_at_any_batch_size(digits_module, options, compiled, images, reference, batch):
    runtime = OpenVinoRuntime(digits_module, options, compiled)
    batch_images = np.ascontiguousarray(images[:batch])
    got = runtime.run({"image": batch_images})
    assert got["label"].shape == (batch,)
    check(got, batch_images, reference)
    assert runtime.calls == 1


def test_answers_are_not_overwritten_by_the_next_run(digits_module, options, compiled, images, reference):
    runtime = OpenVinoRuntime(digits_module, options, compiled)
    first = runtime.run({"image": np.ascontiguousarray(images[:4])})
    runtime.run({"image": np.ascontiguousarray(images[4:8])})
    check(first, images[:4], reference)


def test_the_mlp_matches_eager():
    spec = build_mlp()
    module = InferenceModule.from_spec(spec)
    options = RuntimeOptions(backend="openvino")
    runtime = OpenVinoRuntime(module, options, OpenVinoRuntime.compile(module, options))
    inputs = np.random.default_rng(1).standard_normal((5, *module.example_inputs["x"].shape[1:])).astype(np.float32)
    with torch.inference_mode():
        want = spec.module(torch.from_numpy(inputs)).numpy()
    np.testing.assert_allclose(runtime.run({"x": inputs})["logits"], want, rtol=RTOL, atol=1e-5)


def test_all_runtimes_share_one_compiled_model(digits_module, options, compiled):
    runtimes = [OpenVinoRuntime(digits_module, options, compiled) for _ in range(3)]
    assert all(r.compiled is compiled for r in runtimes)
    assert len({id(r._request) for r in runtimes}) == 3  # one infer request each


def test_refuses_to_build_a_private_compiled_model(digits_module, options):
    with pytest.raises(TypeError, match="shared compiled model"):
        OpenVinoRuntime(digits_module, options)


def test_concurrent_runs_on_two_streams_get_their_own_answers(digits_module, options, images, reference):
    compiled = OpenVinoRuntime.compile(digits_module, RuntimeOptions(num_runtimes=2))
    runtimes = [OpenVinoRuntime(digits_module, options, compiled) for _ in range(4)]
    slices = [np.ascontiguousarray(images[i * 4 : i * 4 + 4]) for i in range(4)]

    def work(i: int) -> list[dict[str, np.ndarray]]:
        return [runtimes[i].run({"image": slices[i]}) for _ in range(30)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for i, outputs in enumerate(results):
        for got in outputs:
            check(got, slices[i], reference)


def test_served_model_builds_one_stream_per_runtime_of_its_plan(digits_module, images, reference):
    options = RuntimeOptions(backend="openvino", warmup_iters=1)  # num_runtimes 0: the plan decides
    model = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    try:
        first, second = model.pool.runtimes
        assert first.compiled is second.compiled is model.selection.compiled
        assert first.compiled.streams == 2

        async def requests():
            return await asyncio.gather(model.infer(images[0].tolist()), model.infer({"image": images[:5].tolist()}))

        single, batch = asyncio.run(requests())
    finally:
        model.close()
    probabilities, label = reference(images[:5])
    np.testing.assert_allclose(single.outputs["probabilities"], probabilities[0], rtol=RTOL, atol=ATOL)
    assert single.outputs["label"] == label[0]
    check(batch.outputs, images[:5], reference)


def test_a_forked_process_builds_its_own_unless_one_stream_of_one_thread_serves():
    single = CompiledOpenVino(object(), 1, 1, "m")
    double = CompiledOpenVino(object(), 2, 1, "m")
    one, two = ThreadPlan(1, 1, 1), ThreadPlan(2, 2, 1)
    assert not OpenVinoRuntime.needs_own_artifact(single, one, forked=True)  # shared with the parent
    assert OpenVinoRuntime.needs_own_artifact(double, one, forked=True)  # would hang (measured)
    assert OpenVinoRuntime.needs_own_artifact(single, two, forked=True)
    assert not OpenVinoRuntime.needs_own_artifact(double, two, forked=False)
    assert OpenVinoRuntime.needs_own_artifact(single, two, forked=False)  # too few streams


def test_a_compiled_model_of_one_stream_answers_in_a_forked_child(digits_module, compiled, images, reference):
    runtime = OpenVinoRuntime(digits_module, RuntimeOptions(), compiled)
    runtime.run({"image": images[:2]})  # the parent has run it, as warm-up does before a fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            got = runtime.run({"image": np.ascontiguousarray(images[:4])})
            os.write(write, got["probabilities"].tobytes())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    probabilities, _ = reference(images[:4])
    np.testing.assert_allclose(np.frombuffer(data, np.float32).reshape(4, 10), probabilities, rtol=RTOL, atol=ATOL)


def test_model_from_an_onnx_file(tmp_path, digits_module, compiled, images, reference):
    source = compiled.source  # the cached export of the digits model, served as a file
    module = InferenceModule.from_spec(load_model(source))
    options = RuntimeOptions(backend="openvino")
    runtime = OpenVinoRuntime(module, options, OpenVinoRuntime.compile(module, options))
    check(runtime.run({"image": np.ascontiguousarray(images[:3])}), images[:3], reference)


def test_missing_package_says_how_to_install_it(digits_module, options, monkeypatch):
    hide_package(monkeypatch, "openvino")
    with pytest.raises(ModelLoadError, match=r"pip install 'inferpool\[openvino\]'"):
        OpenVinoRuntime.compile(digits_module, options)


def test_named_it_moves_the_torch_weights_out_of_memory(tmp_path, images, reference):
    module = InferenceModule.from_spec(build_digits())  # its own: the shared fixture keeps its weights
    options = RuntimeOptions(backend="openvino", compile_cache_dir=str(tmp_path))
    compiled = OpenVinoRuntime.compile(module, options)
    assert mapped(module)
    check(OpenVinoRuntime(module, options, compiled).run({"image": images[:4]}), images[:4], reference)
    auto = InferenceModule.from_spec(build_digits())
    OpenVinoRuntime.compile(auto, RuntimeOptions(compile_cache_dir=str(tmp_path)))  # a candidate: kept
    assert not mapped(auto)
    OpenVinoRuntime.release_weights(auto)  # auto chose it
    assert mapped(auto)


# A supervisor's life in a fresh interpreter (this one ran models of two streams already): load,
# choose the wide lane, fork, build the lane there. Measured on the old code, which built the
# lane here to time it and dropped it before the fork: the child's lane never compiled.
FORKED_LANE = """
import os, signal
from inferpool.engine import InferenceModule, RuntimeOptions
from inferpool.engine.backends.openvino import OpenVinoRuntime
from inferpool.engine.plan.wide import build_lane_bounded, choose
from inferpool.engine.zoo.digits import build
module = InferenceModule.from_spec(build())
options = RuntimeOptions(backend="openvino", lend_idle_cores="on", warmup_iters=1)
narrow = OpenVinoRuntime(module, options, OpenVinoRuntime.compile(module, options))
narrow.run(module.example_inputs)
threads = len(os.listdir("/proc/self/task"))
choice, lane = choose(OpenVinoRuntime, narrow, module, options, cpus=2, forks=True)
assert choice.enabled and choice.wide_ms and lane is None, choice
assert len(os.listdir("/proc/self/task")) == threads  # nothing threaded ran here
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a child of a parent that had run the lane hung in compile_model
    lane, why = build_lane_bounded(OpenVinoRuntime, module, options, 2, timeout=30)
    os._exit(0 if lane is not None and lane.try_run(module.examples(4)) is not None else 3)
print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_supervisor_times_the_lane_apart_and_its_forked_child_builds_one():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", FORKED_LANE], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["child", "0"], done.stdout


def test_opts_into_the_wide_lane_timed_apart():
    assert OpenVinoRuntime.wide_artifact_supported
    assert OpenVinoRuntime.wide_probe_apart
    assert "bf16" in OpenVinoRuntime.wide_precisions


def test_the_probe_apart_times_each_example(digits_module, options):
    examples = [digits_module.example_inputs, digits_module.examples(8)]
    pairs = OpenVinoRuntime.wide_seconds_apart(digits_module, options, 2, examples, repeats=2, timeout=120)
    assert len(pairs) == 2
    assert all(0 < s < 1 for pair in pairs for s in pair)


def test_a_probe_that_fails_or_overruns_says_so():
    with pytest.raises(ModelLoadError, match="exited with 1: "):
        probe_apart(b"not a pickle", timeout=60)
    with pytest.raises(ModelLoadError, match=r"took over 0.001 s"):
        probe_apart(pickle.dumps({}), timeout=0.001)
