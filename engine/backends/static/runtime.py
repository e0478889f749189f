"""``static``: our own Static Runtime on torch.export graphs (shared plan, per-runtime buffers).

``compile`` exports the model once, builds the immutable :class:`~inferpool.engine.backends.static.plan.Plan`
(registers, constants stored once, nodes with pre-resolved callables) and generates one
straight-line ``forward`` per option set (all of them, so ``compile`` needs no options and
runtimes with different options can share it); it then checks every one against eager on
the example inputs. A runtime owns only its buffers: for each input shape it has seen (the
last ``BUFFER_SETS``), one slab carved into the tensors the ``out=`` variants write. It beats
eager by dropping ``nn.Module.__call__`` and per-op Python dispatch, not by its buffers: none
of the four options below changes the speed measurably (docs/BENCHMARKS.md, "static backend",
has the figures against eager, torchscript and onnxruntime).

Options (``RuntimeOptions``), as implemented here:

- ``enable_out_variant``: nodes with a usable ``out=`` overload write into the runtime's
  buffers; off = every node allocates its result, as eager does.
- ``optimize_memory``: buffers whose lifetimes do not overlap share bytes (smaller slab); off =
  one range per value. No effect on speed: the slab is one allocation either way.
- ``cleanup_activations``: the slab is freed after every run and allocated again (one
  allocation) by the next; off = kept between runs (idle memory = one slab per seen shape).
- ``manage_output_tensors``: output-producing nodes write into runtime buffers too. The engine
  hands results on after the runtime is back in the pool (``RuntimeSet.run`` returns from
  inside the lease; batching slices and encoding happen later), so a managed output is copied
  before ``run`` returns -- correct, and never faster than a fresh output.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.parity import Tolerance, eager_outputs, first_mismatch
from inferpool.engine.backends.static.codegen import EXECUTORS, Program, managed_nodes
from inferpool.engine.backends.static.memory import Buffers
from inferpool.engine.backends.static.plan import Plan, build_plan, export
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array

BUFFER_SETS = 4
"""Input shapes whose buffers a runtime keeps (least recently used dropped): batching and
length buckets produce a few recurring shapes; more would only hold idle memory."""


@dataclass(frozen=True)
class StaticModel:
    """What ``compile`` shares between runtimes: the plan and its programs by executor and mode."""

    plan: Plan
    programs: Mapping[tuple[str, bool, bool], Program]

    def program(self, options: RuntimeOptions, executor: str = "codegen") -> Program:
        manage = options.enable_out_variant and options.manage_output_tensors
        return self.programs[executor, options.enable_out_variant, manage]


def compile_static(module: InferenceModule) -> StaticModel:
    plan = build_plan(module, export(module))
    modes = {(out, manage) for out in (False, True) for manage in (False, out)}
    programs = {
        (name, out, manage): make(plan, managed_nodes(plan, out, manage))
        for name, make in EXECUTORS.items()
        for out, manage in modes
    }
    for (name, out, manage), program in programs.items():
        check_parity(module, plan, program, f"executor={name} out_variant={out} manage_outputs={manage}")
    return StaticModel(plan, programs)


def check_parity(module: InferenceModule, plan: Plan, program: Program, mode: str) -> None:
    """The example inputs through the program and through eager: a graph the plan gets wrong
    fails at load, not in traffic."""
    examples = module.example_inputs
    sizes = [examples[name].shape for name, _ in plan.inputs]
    got = program.forward(examples, Buffers(plan, program.managed, sizes, share=True).tensors)
    names = [spec.name for spec in module.schema.outputs]
    wrong = first_mismatch(names, [got[n] for n in names], eager_outputs(module, examples), StaticRuntime.tolerance)
    if wrong is not None:
        raise ModelLoadError(
            f"backend 'static' ({mode}) disagrees with the eager model {module.name!r} on output {wrong!r}; "
            "use backend 'eager'"
        )


class StaticRuntime(Runtime):
    """Runs the shared :class:`StaticModel` with this runtime's own buffers."""

    shared = ("plan", StaticModel)
    eager_kernels = True
    # The same ATen kernels as eager, but max_pool2d in another layout and relu_ in place.
    tolerance = Tolerance(rtol=1e-4, atol=1e-5)

    def __init__(
        self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None, *, executor: str = "codegen"
    ) -> None:
        super().__init__(module, options, compiled)  # checks that it is a StaticModel
        model: StaticModel = compiled
        program = model.program(options, executor)
        self._forward, self._managed, self._plan = program.forward, program.managed, model.plan
        self._input_names = tuple(name for name, _ in model.plan.inputs)
        self._buffers: OrderedDict[tuple[tuple[int, ...], ...], Buffers] = OrderedDict()

    @property
    def buffer_sets(self) -> Mapping[tuple[tuple[int, ...], ...], Buffers]:
        """This runtime's buffers by input sizes, least recently used first."""
        return self._buffers

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> StaticModel:
        return compile_static(module)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        self.calls += 1
        if not self._managed:
            return self._forward(inputs, ())
        buffers = self._buffers_for(tuple(inputs[name].shape for name in self._input_names))
        try:
            return self._forward(inputs, buffers.acquire())
        finally:
            if self.options.cleanup_activations:
                buffers.release()

    def _buffers_for(self, sizes: tuple[tuple[int, ...], ...]) -> Buffers:
        buffers = self._buffers.get(sizes)
        if buffers is None:
            buffers = Buffers(self._plan, self._managed, sizes, share=self.options.optimize_memory)
            self._buffers[sizes] = buffers
            if len(self._buffers) > BUFFER_SETS:
                self._buffers.popitem(last=False)
        else:
            self._buffers.move_to_end(sizes)
        return buffers
