"""The ``static`` backend's op resolution: which Python callable runs each exported op.

``OpOverload.__call__`` goes through Python frames on every call; the public bindings
(``torch._C._nn.linear``, ``torch.relu_``) parse their arguments in C++, a few µs less per call
(docs/BENCHMARKS.md, "static backend"). Every
candidate is kept only if it gives exactly the reference's result on the example values, so a
binding that resolves to another overload, or an ``out=`` variant that resizes, is never used.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

# Where the public, fast Python bindings of aten functions live (the C++ arg parser, not
# OpOverload.__call__'s Python frames).
BINDINGS = tuple(getattr(torch._C, name) for name in ("_VariableFunctions", "_nn", "_special", "_linalg", "_fft"))
# Elementwise unary ops whose result may overwrite their input when nobody reads it later.
INPLACE: dict[Any, Callable[..., Any]] = {
    aten.relu.default: torch.relu_,
    aten.sigmoid.default: torch.sigmoid_,
    aten.tanh.default: torch.tanh_,
    aten.gelu.default: getattr(torch._C._nn, "gelu_"),  # noqa: B009 -- missing from torch's stubs
    aten.silu.default: torch._C._nn.silu_,
}
# Ops whose public binding is not named after the op.
FAST: dict[Any, Callable[..., Any]] = {aten.sym_size.int: torch.Tensor.size, operator.getitem: operator.getitem}


def _max_pool2d_channels_last(x: torch.Tensor, *args: Any) -> torch.Tensor:
    # PyTorch's NCHW max_pool2d kernel is the slow one on CPU from batch 2 up, by more the larger
    # the batch; at batch 1 the two layout copies cost more than the faster kernel saves (the
    # digits CNN's pool at batch 1, 2, 8 and 32: docs/BENCHMARKS.md, "static backend").
    if x.shape[0] == 1:
        return torch.max_pool2d(x, *args)
    pooled = torch.max_pool2d(x.contiguous(memory_format=torch.channels_last), *args)
    return pooled.contiguous()


# Kernels tried before the public binding (kept only if they give the same result on the example).
PREFERRED: dict[Any, Callable[..., Any]] = {aten.max_pool2d.default: _max_pool2d_channels_last}


def public(op: Any) -> Callable[..., Any] | None:
    if op in FAST:
        return FAST[op]
    name = getattr(op, "_opname", None)
    if name is None or getattr(op, "namespace", None) != "aten":
        return None
    return next((getattr(b, name) for b in BINDINGS if hasattr(b, name)), getattr(torch.Tensor, name, None))


def out_candidates(op: Any) -> list[Callable[..., Any] | None]:
    packet = getattr(torch.ops.aten, getattr(op, "_opname", ""), None)
    overload = getattr(op, "_overloadname", None)
    if packet is None or overload is None:
        return []
    out_name = "out" if overload == "default" else f"{overload}_out"
    out_op = getattr(packet, out_name, None) if out_name in packet.overloads() else None
    return [public(op), out_op]


def first_matching(
    reference: Any, candidates: list[Callable[..., Any] | None], args: Any, kwargs: dict[str, Any], out: bool = False
) -> Callable[..., Any] | None:
    for candidate in candidates:
        if candidate is None:
            continue
        extra = {"out": torch.empty_like(reference, memory_format=torch.contiguous_format)} if out else {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # e.g. an out= that resizes: refused, not silenced
                got = candidate(*args, **kwargs, **extra)
        except Exception:  # noqa: BLE001 -- a candidate that does not fit is simply not used
            continue
        if same(reference, extra.get("out", got)):
            return candidate
    return None


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)
