"""The ``static`` backend's compiler: a torch.export graph turned into an immutable plan.

A plan is Static Runtime's shared half: every value of the graph has a register; constants
(weights, buffers) sit in registers filled once with the exported tensors themselves (never
copied); each node is a flat record of its input registers, its output register and the
callables it may run through -- the functional op, its ``out=`` variant, an in-place variant.
Callables are resolved and checked here, once: each node runs on concrete example values
through its ``OpOverload`` (the reference) and every faster candidate (the public binding such
as ``torch._C._nn.linear``, the ``out=`` overload, ``relu_``) is kept only if it gives the same
result without a warning.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import sympy  # type: ignore[import-untyped]  # torch's own dependency, untyped
import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from inferpool.engine.backends.static.ops import INPLACE, PREFERRED, first_matching, out_candidates, public
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.schema import Array

aten = torch.ops.aten
# Nodes that only assert what export already proved; they return nothing anyone reads.
_DROPPED = {
    aten._assert_tensor_metadata.default,
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
}


@dataclass(frozen=True)
class Reg:
    """A register reference inside a node's argument template."""

    index: int


@dataclass(frozen=True)
class PlanNode:
    name: str
    op: Any
    """The exported ``OpOverload`` (or Python callable for symbolic-int arithmetic)."""
    fn: Callable[..., Any]
    """The fastest functional callable that matched ``op`` on the example values."""
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    out: int
    out_fn: Callable[..., Any] | None = None
    """Takes ``out=``: writes the result into a given buffer. None = no usable out variant."""
    inplace_fn: Callable[..., Any] | None = None
    """Overwrites its first argument (only set when that value is dead after this node)."""
    alias_of: int | None = None
    """The register whose storage this node's result views (view ops, in-place ops)."""
    shape: tuple[int | sympy.Expr, ...] = ()
    dtype: torch.dtype | None = None

    def inputs(self) -> Iterator[int]:
        yield from _regs(self.args)
        yield from _regs(tuple(self.kwargs.values()))


@dataclass(frozen=True)
class Plan:
    """Immutable and shared by every runtime of one model."""

    registers: int
    inputs: tuple[tuple[str, int], ...]
    constants: tuple[tuple[int, torch.Tensor], ...]
    nodes: tuple[PlanNode, ...]
    outputs: tuple[tuple[str, int], ...]
    symbols: tuple[tuple[sympy.Symbol, int, int], ...]
    """Each symbolic size and where it comes from: (symbol, input index, dimension)."""
    last_use: Mapping[int, int] = field(default_factory=dict)
    """Register -> index of the last node reading it or any view of it (len(nodes) = output)."""


def _regs(template: Any) -> Iterator[int]:
    if isinstance(template, Reg):
        yield template.index
    elif isinstance(template, list | tuple):
        for item in template:
            yield from _regs(item)


def concrete(template: Any, values: list[Any]) -> Any:
    """A template with its registers replaced by values."""
    if isinstance(template, Reg):
        return values[template.index]
    if isinstance(template, list | tuple):
        return type(template)(concrete(item, values) for item in template)
    return template


@contextmanager
def quiet_export() -> Iterator[None]:
    with warnings.catch_warnings():
        # torch's own pytree deprecation inside run_decompositions; nothing a user can act on.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        yield


def export(module: InferenceModule) -> torch.export.ExportedProgram:
    """``module.module`` through torch.export, every schema dimension marked None dynamic."""
    examples = tuple(torch.from_numpy(_repeat(module, s.name)) for s in module.schema.inputs)
    dynamic = tuple(
        {i: torch.export.Dim.DYNAMIC for i, d in enumerate(s.shape) if d is None} or None for s in module.schema.inputs
    )
    try:
        with quiet_export():
            program = torch.export.export(module.module, examples, dynamic_shapes=dynamic)
            # Functional: no op mutates its inputs, so lifetimes and in-place fusion are sound.
            return cast(torch.export.ExportedProgram, program.run_decompositions({}))
    except Exception as exc:
        raise ModelLoadError(
            f"backend 'static' cannot export model {module.name!r} with torch.export; serve it with backend "
            f"'eager' (or make it exportable). torch.export said: {exc}"
        ) from exc


def _repeat(module: InferenceModule, name: str) -> Array:
    # torch.export specialises dimensions of example size 0 or 1: grow every dynamic one to 2.
    spec = next(s for s in module.schema.inputs if s.name == name)
    array = module.example_inputs[name]
    for axis, size in enumerate(spec.shape):
        if size is None and array.shape[axis] < 2:
            array = np.concatenate([array] * 2, axis=axis)
    return np.ascontiguousarray(array)


def build_plan(module: InferenceModule, program: torch.export.ExportedProgram) -> Plan:
    """The plan for ``program``; raises ModelLoadError for graphs it cannot run."""
    lifted = _lifted_constants(program)
    registers: dict[str, int] = {}
    inputs: list[tuple[str, int]] = []
    constants: list[tuple[int, torch.Tensor]] = []
    symbols: list[tuple[sympy.Symbol, int, int]] = []
    nodes: list[PlanNode] = []
    values: list[Any] = []  # concrete example values per register, for checking candidates
    examples = [torch.from_numpy(_repeat(module, s.name)) for s in module.schema.inputs]

    def new_register(name: str, value: Any) -> int:
        registers[name] = len(values)
        values.append(value)
        return registers[name]

    def template(arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            return Reg(registers[arg.name])
        if isinstance(arg, list | tuple):
            return type(arg)(template(a) for a in arg)
        return arg

    with torch.inference_mode():
        for node in program.graph.nodes:
            if node.op == "placeholder":
                if node.name in lifted:
                    constants.append((new_register(node.name, lifted[node.name]), lifted[node.name]))
                    continue
                index = len(inputs)
                inputs.append((module.schema.inputs[index].name, new_register(node.name, examples[index])))
                for dim, size in enumerate(node.meta["val"].shape):
                    if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                        symbols.append((size.node.expr, index, dim))
            elif node.op == "call_function":
                if node.target in _DROPPED:
                    continue
                planned = _plan_node(node, template, values, new_register, nodes)
                known = {symbol for symbol, _, _ in symbols}
                if not all(isinstance(d, int) or d.free_symbols <= known for d in planned.shape):
                    # A size no input size determines (a symbol export derived itself): allocate it.
                    planned = replace(planned, out_fn=None, shape=(), dtype=None)
                nodes.append(planned)
            elif node.op == "output":
                outputs = [template(arg) for arg in node.args[0]]
            else:
                raise ModelLoadError(
                    f"backend 'static' cannot run graph node {node.format_node()}; use backend 'eager'"
                )
    names = [s.name for s in module.schema.outputs]
    if len(outputs) != len(names) or not all(isinstance(o, Reg) for o in outputs):
        raise ModelLoadError(f"backend 'static' cannot map the exported outputs {outputs} of {module.name!r}")
    plan = Plan(
        registers=len(values),
        inputs=tuple(inputs),
        constants=tuple(constants),
        nodes=tuple(nodes),
        outputs=tuple((name, o.index) for name, o in zip(names, outputs, strict=True)),
        symbols=tuple(symbols),
    )
    return _with_lifetimes(_fuse_inplace(plan, values))


def _lifted_constants(program: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    kinds = torch.export.graph_signature.InputKind
    by_name: dict[str, torch.Tensor] = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind == kinds.USER_INPUT:
            continue
        if spec.kind not in (kinds.PARAMETER, kinds.BUFFER, kinds.CONSTANT_TENSOR) or spec.target is None:
            raise ModelLoadError(f"backend 'static' cannot run a graph input of kind {spec.kind.name}")
        source = program.constants if spec.target in program.constants else program.state_dict
        by_name[spec.arg.name] = source[spec.target]
    return by_name


def _plan_node(
    node: torch.fx.Node, template: Callable[[Any], Any], values: list[Any], new_register: Any, earlier: list[PlanNode]
) -> PlanNode:
    op = cast(Callable[..., Any], node.target)  # call_function nodes: an OpOverload or operator.*
    args, kwargs = template(node.args), {k: template(v) for k, v in node.kwargs.items()}
    real_args, real_kwargs = concrete(args, values), {k: concrete(v, values) for k, v in kwargs.items()}
    schema = getattr(op, "_schema", None)
    if schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        raise ModelLoadError(f"backend 'static' cannot run {op}, which mutates its input; use backend 'eager'")
    try:
        reference = op(*real_args, **real_kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"backend 'static': {op} failed on the example inputs ({exc}); use backend 'eager'"
        ) from exc
    candidates = [PREFERRED.get(op), public(op)]
    fn = first_matching(reference, candidates, real_args, real_kwargs) or op
    aliased = schema is not None and any(r.alias_info is not None for r in schema.returns)
    alias_of = next(_regs(args[:1]), None) if aliased else _alias_base(op, args, earlier)
    meta = node.meta.get("val")
    out_fn = None
    # A size that depends on the data (an unbacked symbol) cannot be planned ahead.
    plannable = isinstance(meta, torch.Tensor) and not free_unbacked_symbols(meta)
    if plannable and not aliased and isinstance(reference, torch.Tensor):
        out_fn = first_matching(reference, out_candidates(op), real_args, real_kwargs, out=True)
    register = new_register(node.name, reference)
    shape = (
        tuple(d.node.expr if isinstance(d, torch.SymInt) else d for d in meta.shape)
        if out_fn and meta is not None
        else ()
    )
    return PlanNode(
        name=node.name,
        op=op,
        fn=fn,
        args=args,
        kwargs=kwargs,
        out=register,
        out_fn=out_fn,
        alias_of=alias_of,
        shape=shape,
        dtype=reference.dtype if out_fn else None,
    )


def _alias_base(op: Any, args: tuple[Any, ...], earlier: list[PlanNode]) -> int | None:
    # An item of a tuple that views its input (split, unbind) views that input too.
    if op is operator.getitem and args and isinstance(args[0], Reg):
        producer = next((n for n in reversed(earlier) if n.out == args[0].index), None)
        if producer is not None and producer.alias_of is not None:
            return args[0].index
    return None


def _fuse_inplace(plan: Plan, values: list[Any]) -> Plan:
    """Let an elementwise op overwrite its input when that input is a fresh intermediate nobody
    reads afterwards (linear -> relu_): one allocation (or buffer) less, no extra copy."""
    readers: dict[int, list[int]] = {}
    views = {n.alias_of for n in plan.nodes if n.alias_of is not None}
    produced = {n.out: n for n in plan.nodes}
    escaping = {reg for _, reg in plan.outputs}
    for i, node in enumerate(plan.nodes):
        for reg in node.inputs():
            readers.setdefault(reg, []).append(i)
    nodes = list(plan.nodes)
    for i, node in enumerate(nodes):
        inplace = INPLACE.get(node.op)
        source = node.args[0] if node.args else None
        if inplace is None or not isinstance(source, Reg) or source.index not in produced:
            continue
        fresh = produced[source.index].alias_of is None and source.index not in views
        if not fresh or readers[source.index] != [i] or source.index in escaping:
            continue
        trial = values[source.index].clone()
        if first_matching(values[node.out], [inplace], (trial, *concrete(node.args[1:], values)), {}) is None:
            continue
        # Its result is its input's storage: no out= variant (it would be a second buffer).
        nodes[i] = replace(node, out_fn=None, inplace_fn=inplace, alias_of=source.index, shape=(), dtype=None)
    return replace(plan, nodes=tuple(nodes))


def _with_lifetimes(plan: Plan) -> Plan:
    base = {n.out: n.alias_of for n in plan.nodes if n.alias_of is not None}

    def root(reg: int) -> int:
        while reg in base:
            reg = base[reg]
        return reg

    last: dict[int, int] = {}
    for i, node in enumerate(plan.nodes):
        for reg in (*node.inputs(), node.out):
            last[root(reg)] = i
    for _, reg in plan.outputs:
        last[root(reg)] = len(plan.nodes)
    return replace(plan, last_use=last)
