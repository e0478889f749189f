from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from torch import nn

from inferpool.engine import BACKENDS, InferenceModule, ModelLoadError, RuntimeOptions, ServedModel, load_model
from inferpool.engine.backends.eager import EagerRuntime
from inferpool.engine.backends.static import StaticRuntime
from inferpool.engine.backends.static.memory import Buffers, Slot, assign_offsets
from inferpool.engine.backends.static.runtime import BUFFER_SETS
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.zoo import digits, mlp

# The plan runs the same CPU kernels as eager (out= and in-place variants of the same ops),
# so results agree to float rounding; kernels may block differently per batch size.
RTOL, ATOL = 1e-5, 1e-6
BATCHES = (1, 3, 16)
FLAGS = ("enable_out_variant", "optimize_memory", "manage_output_tensors", "cleanup_activations")
COMBOS = [dict(zip(FLAGS, values, strict=True)) for values in itertools.product((True, False), repeat=len(FLAGS))]
BUILDERS = {"digits": digits.build, "mlp": mlp.build}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def model(request):
    """(module, shared plan, eager reference runtime on a separately built copy) per test model."""
    module = InferenceModule.from_spec(BUILDERS[request.param]())
    reference = EagerRuntime(InferenceModule.from_spec(BUILDERS[request.param]()), RuntimeOptions())
    return module, StaticRuntime.compile(module, RuntimeOptions(backend="static")), reference


def inputs_for(module: InferenceModule, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Both test models' inputs have fixed per-sample dimensions (None is only the batch).
    shapes = {s.name: (batch, *(d or 1 for d in s.shape[1:])) for s in module.schema.inputs}
    return {name: rng.integers(0, 17, size=shape).astype(np.float32) for name, shape in shapes.items()}


def check(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype
        assert got[name].shape == expected.shape
        np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=ATOL, err_msg=name)


def test_registered_by_name():
    assert BACKENDS["static"] is StaticRuntime


@pytest.mark.parametrize("flags", COMBOS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "all-off")
def test_matches_eager_for_every_option_combination_and_batch_size(model, flags):
    module, plan, reference = model
    runtime = StaticRuntime(module, RuntimeOptions(backend="static", **flags), plan)
    earlier = []
    # Sizes change and come back (buffers kept per shape), and every earlier answer must
    # survive later runs: the engine reads outputs after the runtime is back in the pool.
    for step, batch in enumerate((*BATCHES, 1, 16)):
        inputs = inputs_for(module, batch, seed=step)
        got = runtime.run(inputs)
        check(got, reference.run(inputs))
        earlier.append((got, reference.run(inputs)))
    for got, want in earlier:
        check(got, want)
    assert runtime.calls == len(earlier)


@pytest.mark.parametrize("out_variant", [True, False])
def test_the_loop_executor_gives_the_same_answers(model, out_variant):
    module, plan, reference = model
    runtime = StaticRuntime(module, RuntimeOptions(enable_out_variant=out_variant), plan, executor="loop")
    for batch in BATCHES:
        inputs = inputs_for(module, batch)
        check(runtime.run(inputs), reference.run(inputs))


def test_default_plan_writes_into_buffers_and_fuses_relu_in_place(model):
    _, plan, _ = model
    program = plan.program(RuntimeOptions())
    linears = [i for i, n in enumerate(plan.plan.nodes) if n.name.startswith("linear")]
    assert set(linears[:-1]) <= set(program.managed)  # the last one's result leaves the graph
    assert "out=" in program.source
    assert [n.name for n in plan.plan.nodes if n.inplace_fn is torch.relu_] == [
        n.name for n in plan.plan.nodes if n.name.startswith("relu")
    ]
    assert not plan.program(RuntimeOptions(enable_out_variant=False)).managed


def test_optimize_memory_shares_bytes_between_values_that_do_not_overlap(model):
    module, plan, _ = model
    program = plan.program(RuntimeOptions(manage_output_tensors=True))  # on the MLP only the output can share
    sizes = [(16, *s.shape[1:]) for s in module.schema.inputs]
    shared = Buffers(plan.plan, program.managed, sizes, share=True)
    separate = Buffers(plan.plan, program.managed, sizes, share=False)
    assert shared.nbytes < separate.nbytes
    assert separate.nbytes >= sum(t.numel() * t.element_size() for t in separate.tensors)


def test_offsets_of_values_alive_at_once_never_overlap():
    rng = np.random.default_rng(1)
    for _ in range(50):
        slots = []
        for _ in range(12):
            first = int(rng.integers(0, 20))
            slots.append(Slot(int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
        offsets, total = assign_offsets(slots, share=True)
        for (a, sa), (b, sb) in itertools.combinations(zip(offsets, slots, strict=True), 2):
            if sa.first <= sb.last and sb.first <= sa.last:
                assert a + sa.nbytes <= b or b + sb.nbytes <= a
        assert total >= max(o + s.nbytes for o, s in zip(offsets, slots, strict=True))
        assert total <= assign_offsets(slots, share=False)[1]


@pytest.mark.parametrize("cleanup", [True, False])
def test_cleanup_activations_frees_the_slab_between_runs(model, cleanup):
    module, plan, _ = model
    runtime = StaticRuntime(module, RuntimeOptions(cleanup_activations=cleanup), plan)
    runtime.run(inputs_for(module, 3))
    (buffers,) = runtime.buffer_sets.values()
    assert (buffers.storage.nbytes() == 0) is cleanup
    assert buffers.nbytes > 0


def test_keeps_buffers_for_a_bounded_number_of_shapes(model):
    module, plan, reference = model
    runtime = StaticRuntime(module, RuntimeOptions(), plan)
    for batch in range(1, BUFFER_SETS + 3):
        inputs = inputs_for(module, batch)
        check(runtime.run(inputs), reference.run(inputs))
    assert list(runtime.buffer_sets) == [
        tuple((b, *s.shape[1:]) for s in module.schema.inputs) for b in range(3, BUFFER_SETS + 3)
    ]


def test_four_threads_each_with_its_own_runtime_get_their_own_answers(model):
    module, plan, reference = model
    runtimes = [StaticRuntime(module, RuntimeOptions(), plan) for _ in range(4)]
    requests = [inputs_for(module, 1 + i, seed=i) for i in range(4)]
    wanted = [reference.run(r) for r in requests]

    def work(i: int) -> list[dict[str, np.ndarray]]:
        return [runtimes[i].run(requests[i]) for _ in range(50)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for i, answers in enumerate(results):
        for got in answers:
            check(got, wanted[i])


def test_runtimes_share_one_plan_and_the_modules_own_weights(model):
    module, plan, _ = model
    runtimes = [StaticRuntime(module, RuntimeOptions(), plan) for _ in range(3)]
    assert all(r.compiled is plan for r in runtimes)
    weights = {p.data_ptr() for p in module.module.parameters()}
    assert {t.data_ptr() for _, t in plan.plan.constants} == weights


def test_refuses_to_build_a_private_plan(digits_module):
    with pytest.raises(TypeError, match="shared plan"):
        StaticRuntime(digits_module, RuntimeOptions())


def test_served_model_answers_through_the_static_backend(digits_module, images, reference):
    options = RuntimeOptions(backend="static", num_runtimes=2, warmup_iters=1, manage_output_tensors=True)
    served = ServedModel(digits_module, options, ThreadPlan(cpus=2, runtimes=2, intra_op_threads=1), max_queue=8)
    requests = [{"image": images[i : i + 3].tolist()} for i in range(8)]  # concurrent, on both runtimes
    try:
        assert {type(r) for r in served.pool.runtimes} == {StaticRuntime}
        assert len({id(r.compiled) for r in served.pool.runtimes}) == 1
        answers = asyncio.run(_all(served, requests))
    finally:
        served.close()
    for i, answer in enumerate(answers):
        probabilities, label = reference(images[i : i + 3])
        np.testing.assert_allclose(answer.outputs["probabilities"], probabilities, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(answer.outputs["label"], label)


class Aliases(nn.Module):
    """Views of intermediates leaving the graph, a value read twice, the input returned as is."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = torch.relu(x * 2)
        flat = h.reshape(h.shape[0], -1)
        return flat, torch.sigmoid(h) + h, x


@pytest.fixture(scope="module")
def aliases():
    spec = ModelSpec(
        module=Aliases(), example_inputs={"x": torch.ones(1, 3, 4)}, output_names=("flat", "mixed", "same")
    )
    module = InferenceModule.from_spec(spec)
    return module, StaticRuntime.compile(module, RuntimeOptions())


@pytest.mark.parametrize("flags", COMBOS[::3], ids=lambda f: "-".join(k for k, v in f.items() if v) or "all-off")
def test_views_and_inputs_that_leave_the_graph_are_never_buffers_shared_with_the_next_run(aliases, flags):
    module, plan = aliases
    runtime = StaticRuntime(module, RuntimeOptions(**flags), plan)
    first = np.random.default_rng(0).standard_normal((3, 3, 4)).astype(np.float32)
    got = runtime.run({"x": first})
    runtime.run({"x": -first})  # same shape: the same buffers, if any
    with torch.inference_mode():
        want = Aliases()(torch.from_numpy(first))
    for name, expected in zip(("flat", "mixed", "same"), want, strict=True):
        np.testing.assert_allclose(got[name], expected.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
    assert not np.shares_memory(got["same"], first)


async def _all(served: ServedModel, requests: list[dict[str, list]]) -> list:
    return await asyncio.gather(*(served.infer(r) for r in requests))


def test_model_from_a_torch_export_archive(digits_pt2, images, reference):
    module = InferenceModule.from_spec(load_model(str(digits_pt2)))
    runtime = StaticRuntime(module, RuntimeOptions(), StaticRuntime.compile(module, RuntimeOptions()))
    for batch in (1, 16):
        got = runtime.run({"image": np.ascontiguousarray(images[:batch])})
        probabilities, label = reference(images[:batch])
        np.testing.assert_allclose(got[module.schema.outputs[0].name], probabilities, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(got[module.schema.outputs[1].name], label)


class DataDependentBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x - 1


def test_a_model_torch_export_cannot_capture_is_a_model_load_error():
    module = InferenceModule.from_spec(ModelSpec(module=DataDependentBranch(), example_inputs={"x": torch.ones(1, 4)}))
    with pytest.raises(
        ModelLoadError, match=r"cannot export model 'model' with torch\.export; serve it with backend 'eager'"
    ):
        StaticRuntime.compile(module, RuntimeOptions(backend="static"))


def test_minilm_matches_eager_with_dynamic_batch_and_sequence_length():
    from inferpool.engine.zoo.minilm import MiniLMHandler, build

    module = InferenceModule.from_spec(build())
    static = StaticRuntime(module, RuntimeOptions(), StaticRuntime.compile(module, RuntimeOptions()))
    eager = EagerRuntime(module, RuntimeOptions())
    handler = MiniLMHandler()
    for texts in (["One short sentence."], ["A longer sentence, about serving models on CPUs. " * 4, "Hi.", "x"]):
        arrays, _ = handler.preprocess(texts)
        got, want = static.run(arrays), eager.run(arrays)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
