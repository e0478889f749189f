"""The ``static`` backend's memory planner: one slab of bytes per runtime and input shape.

Every value an ``out=`` variant writes (a *managed* value) gets a byte range in one
``UntypedStorage``; its tensor is a view of that storage, made once per input shape, so a run
allocates nothing for them. With ``optimize_memory`` two values share bytes when their
lifetimes (first write to last read of the value or of any view of it, both inclusive, so a
node never writes over its own inputs) do not overlap: greedy, largest first, lowest offset
that fits (Static Runtime's and TVM's strategy). Without it each value has its own range.

``release`` shrinks the slab to nothing (``cleanup_activations``) and ``acquire`` regrows it
before the next run: one allocation per run instead of one per value; the views follow the
storage, so nothing is rebuilt. Sizes come from the exported graph's symbolic shapes, evaluated
on the input's sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sympy  # type: ignore[import-untyped]
import torch

from inferpool.engine.backends.static.plan import Plan, PlanNode

ALIGNMENT = 64  # bytes: a cache line, and a multiple of every dtype's size


@dataclass(frozen=True)
class Slot:
    nbytes: int
    first: int
    last: int


def assign_offsets(slots: Sequence[Slot], share: bool) -> tuple[list[int], int]:
    """A byte offset per slot and the total size; slots overlapping in time never overlap in bytes."""
    offsets = [0] * len(slots)
    placed: list[tuple[int, int, Slot]] = []  # (offset, end, slot)
    total = 0
    for i in sorted(range(len(slots)), key=lambda i: -slots[i].nbytes):
        slot = slots[i]
        size = _aligned(slot.nbytes)
        offset = total
        if share:
            busy = sorted((o, e) for o, e, s in placed if s.first <= slot.last and slot.first <= s.last)
            offset = 0
            for start, end in busy:
                if offset + size <= start:
                    break
                offset = max(offset, end)
        offsets[i] = offset
        placed.append((offset, offset + size, slot))
        total = max(total, offset + size)
    return offsets, total


def _aligned(nbytes: int) -> int:
    return max(ALIGNMENT, -(-nbytes // ALIGNMENT) * ALIGNMENT)


class Buffers:
    """The managed tensors of one runtime for one set of input sizes."""

    def __init__(self, plan: Plan, managed: Sequence[int], sizes: Sequence[Sequence[int]], share: bool) -> None:
        bindings = {symbol: sympy.Integer(sizes[i][dim]) for symbol, i, dim in plan.symbols}
        nodes = [plan.nodes[i] for i in managed]
        shapes = [tuple(_evaluate(d, bindings) for d in node.shape) for node in nodes]
        slots = [
            Slot(_nbytes(shape, node), first, plan.last_use[node.out])
            for node, shape, first in zip(nodes, shapes, managed, strict=True)
        ]
        offsets, self.nbytes = assign_offsets(slots, share)
        self.storage = torch.UntypedStorage(self.nbytes)  # type: ignore[no-untyped-call]
        self.tensors = tuple(
            _view(self.storage, offset, shape, node.dtype)
            for node, shape, offset in zip(nodes, shapes, offsets, strict=True)
        )
        self.held = True

    def acquire(self) -> tuple[torch.Tensor, ...]:
        if not self.held:
            self.storage.resize_(self.nbytes)
            self.held = True
        return self.tensors

    def release(self) -> None:
        self.storage.resize_(0)
        self.held = False


def _evaluate(dim: int | sympy.Expr, bindings: Mapping[sympy.Symbol, sympy.Integer]) -> int:
    return dim if isinstance(dim, int) else int(dim.xreplace(bindings))


def _nbytes(shape: tuple[int, ...], node: PlanNode) -> int:
    assert node.dtype is not None  # managed nodes always have one (see inferpool.engine.backends.static.plan)
    count = 1
    for d in shape:
        count *= d
    return count * node.dtype.itemsize


def _view(
    storage: torch.UntypedStorage, offset: int, shape: tuple[int, ...], dtype: torch.dtype | None
) -> torch.Tensor:
    assert dtype is not None
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return torch.empty(0, dtype=dtype).set_(storage, offset // dtype.itemsize, shape, strides)
