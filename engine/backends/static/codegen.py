"""Executors for a plan: straight-line Python generated from it, or a loop over its nodes.

Both run the same steps: each node calls its functional callable into a fresh tensor, its
``out=`` variant into a managed buffer, or its in-place variant over its dead input. The
interpreter keeps values in a per-call register list and walks the nodes; the generated
function (as torch.fx's GraphModule does) keeps them in local variables and has every callable
and constant bound as a default argument, so a node costs one call and no indexing. Measured on
the MLP and the digits CNN (loadtest/bench/static.py) the generated code is the faster, so it
is the one runtimes use; the interpreter stays as the executor anyone can step through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from inferpool.engine.backends.static.plan import Plan, PlanNode, Reg, concrete
from inferpool.engine.schema import Array

Forward = Callable[[Mapping[str, Array], Sequence[torch.Tensor]], dict[str, Array]]
_LITERALS = (int, bool, str, type(None))


@dataclass(frozen=True)
class Program:
    forward: Forward
    managed: tuple[int, ...]
    """Indices of the nodes that write into runtime buffers, in the order ``forward`` takes them."""
    source: str = ""


def managed_nodes(plan: Plan, out_variant: bool, manage_outputs: bool) -> tuple[int, ...]:
    """Nodes that run through their ``out=`` variant into buffers the runtime owns. A value that
    leaves the graph (or whose view does) is one only with ``manage_outputs``."""
    if not out_variant:
        return ()
    base = {n.out: n.alias_of for n in plan.nodes if n.alias_of is not None}

    def root(reg: int) -> int:
        while reg in base:
            reg = base[reg]
        return reg

    escaping = {root(reg) for _, reg in plan.outputs}
    return tuple(
        i for i, n in enumerate(plan.nodes) if n.out_fn is not None and (manage_outputs or n.out not in escaping)
    )


def _output_copies(plan: Plan, managed: tuple[int, ...]) -> dict[int, bool]:
    """Per output register: must it be copied? Yes if it lives in a runtime buffer (it would be
    overwritten by the next request once the runtime is back in the pool) or is an input or a
    shared constant."""
    owned = {plan.nodes[i].out for i in managed}
    base = {n.out: n.alias_of for n in plan.nodes if n.alias_of is not None}
    produced = {n.out for n in plan.nodes}
    copies = {}
    for _, reg in plan.outputs:
        root = reg
        while root in base:
            root = base[root]
        copies[reg] = root in owned or root not in produced
    return copies


def generate(plan: Plan, managed: tuple[int, ...]) -> Program:
    """Straight-line Python for the plan with the given nodes writing into buffers."""
    bound: dict[str, Any] = {"_from_numpy": torch.from_numpy, "_inference_mode": torch._C._InferenceMode}
    names = {reg: f"c{reg}" for reg, _ in plan.constants}
    bound.update({f"c{reg}": tensor for reg, tensor in plan.constants})
    lines = ["_guard = _inference_mode(True)", "try:"]
    body = [f"v{reg} = _from_numpy(inputs[{name!r}])" for name, reg in plan.inputs]
    names.update({reg: f"v{reg}" for _, reg in plan.inputs})
    if managed:
        targets = [f"b{plan.nodes[i].out}" for i in managed]
        body.append(f"{', '.join(targets)}, = buffers")
    steps: list[tuple[str, set[str]]] = []
    for i, node in enumerate(plan.nodes):
        bound[f"f{i}"] = node.inplace_fn or (node.out_fn if i in managed else None) or node.fn
        call = _render_call(node, names, bound)
        reads = {names[reg] for reg in node.inputs()}
        if node.inplace_fn is not None:
            steps.append((f"f{i}({call})", reads))
            names[node.out] = names[node.args[0].index]
        elif i in managed:
            names[node.out] = f"b{node.out}"
            steps.append((f"f{i}({call}{', ' if call else ''}out=b{node.out})", reads))
        else:
            names[node.out] = f"v{node.out}"
            steps.append((f"v{node.out} = f{i}({call})", reads))
    # Drop each fresh value's name after its last reader, so intermediates are freed as in eager.
    returned = {names[reg] for _, reg in plan.outputs}
    last = {name: i for i, (_, reads) in enumerate(steps) for name in reads if name.startswith("v")}
    for i, (line, _) in enumerate(steps):
        body.append(line)
        dead = sorted(name for name, at in last.items() if at == i and name not in returned)
        if dead:
            body.append(f"del {', '.join(dead)}")
    copies = _output_copies(plan, managed)
    outputs = ", ".join(
        f"{name!r}: {names[reg]}{'.clone()' if copies[reg] else ''}.numpy()" for name, reg in plan.outputs
    )
    body.append(f"return {{{outputs}}}")
    lines += [f"    {line}" for line in body] + ["finally:", "    del _guard"]
    defaults = ", ".join(f"{key}={key}" for key in bound)
    source = f"def forward(inputs, buffers, *, {defaults}):\n" + "".join(f"    {line}\n" for line in lines)
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<static plan {id(plan):x}>", "exec"), dict(bound), namespace)
    return Program(namespace["forward"], managed, source)


def _render_call(node: PlanNode, names: Mapping[int, str], bound: dict[str, Any]) -> str:
    args = [_render(a, names, bound) for a in node.args]
    args += [f"{k}={_render(v, names, bound)}" for k, v in node.kwargs.items()]
    return ", ".join(args)


def _render(value: Any, names: Mapping[int, str], bound: dict[str, Any]) -> str:
    if isinstance(value, Reg):
        return names[value.index]
    if isinstance(value, list):
        return "[" + ", ".join(_render(v, names, bound) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(f"{_render(v, names, bound)}, " for v in value) + ")"
    if isinstance(value, _LITERALS) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    key = f"k{len(bound)}"  # dtypes, devices, layouts, inf: bound, not spelled out
    bound[key] = value
    return key


class Interpreter:
    """The same steps as :func:`generate`, walked by a loop over a register list."""

    def __init__(self, plan: Plan, managed: tuple[int, ...]) -> None:
        self.plan, self.managed = plan, managed
        self.registers: list[Any] = [None] * plan.registers
        for reg, tensor in plan.constants:
            self.registers[reg] = tensor
        self.buffer_regs = tuple(plan.nodes[i].out for i in managed)
        self.copies = _output_copies(plan, managed)
        self.steps: list[tuple[PlanNode, Callable[..., Any], bool]] = [
            (node, node.inplace_fn or (node.out_fn if i in managed else None) or node.fn, i in managed)
            for i, node in enumerate(plan.nodes)
        ]

    def __call__(self, inputs: Mapping[str, Array], buffers: Sequence[torch.Tensor]) -> dict[str, Array]:
        regs = list(self.registers)  # per call: a runtime's own copy of the constant registers
        for name, reg in self.plan.inputs:
            regs[reg] = torch.from_numpy(inputs[name])
        for reg, tensor in zip(self.buffer_regs, buffers, strict=True):
            regs[reg] = tensor
        with torch.inference_mode():
            for node, fn, into_buffer in self.steps:
                args = concrete(node.args, regs)
                kwargs = {k: concrete(v, regs) for k, v in node.kwargs.items()} if node.kwargs else {}
                if node.inplace_fn is not None:
                    regs[node.out] = fn(*args)
                elif into_buffer:
                    fn(*args, **kwargs, out=regs[node.out])
                else:
                    regs[node.out] = fn(*args, **kwargs)
            return {
                name: (regs[reg].clone() if self.copies[reg] else regs[reg]).numpy() for name, reg in self.plan.outputs
            }


def interpret(plan: Plan, managed: tuple[int, ...]) -> Program:
    return Program(Interpreter(plan, managed), managed)


EXECUTORS: dict[str, Callable[[Plan, tuple[int, ...]], Program]] = {"codegen": generate, "loop": interpret}
