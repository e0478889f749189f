"""Input/output schema of a model, and the checks that turn request data into tensors.

The schema is the one source of truth for request validation, the OpenAPI docs and the
Open Inference Protocol metadata. Dimension 0 may be the dynamic batch dimension (``None``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from inferpool.engine.errors import InvalidInput

Array = npt.NDArray[Any]

# Which kinds of request data may be cast to each kind of model dtype without losing
# meaning: ints widen to floats, but floats are never silently truncated to ints.
_ACCEPTED_KINDS = {"f": "fiu", "i": "iu", "u": "u", "b": "b"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int | None, ...]

    @property
    def batched(self) -> bool:
        return bool(self.shape) and self.shape[0] is None

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        return self.shape[1:] if self.batched else self.shape

    @property
    def sample_numel(self) -> int:
        return math.prod(d for d in self.sample_shape if d is not None)

    def describe(self) -> str:
        dims = ", ".join("batch" if d is None else str(d) for d in self.shape)
        return f"[{dims}]"

    def json_schema(self, *, output: bool = False) -> dict[str, Any]:
        """JSON Schema of one sample (nested arrays) for the OpenAPI docs. Float outputs may be
        null: that is how NaN and infinity travel, since JSON has no literal for them."""
        kind = np.dtype(self.dtype).kind
        leaf: dict[str, Any] = {"type": _JSON_TYPES[kind]} | _json_range(self.dtype)
        if output and kind == "f":
            leaf = {"type": ["number", "null"]}
        for dim in reversed(self.sample_shape):
            leaf = {"type": "array", "items": leaf}
            if dim is not None:
                leaf |= {"minItems": dim, "maxItems": dim}
        return leaf

    def coerce(self, value: object, *, strict: bool) -> tuple[Array, bool]:
        """Request data -> (array shaped like the schema, was it a single sample?).

        ``strict`` checks every dimension and rejects NaN/inf; otherwise only the number of
        elements per sample is checked (the AOTInductor-style minimum), and any layout with
        the right count is reshaped.
        """
        array = self._as_array(value)
        single = self.batched and array.ndim == len(self.shape) - 1
        if single:
            array = array[None]
        if strict:
            self._check_shape(array, single)
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise InvalidInput(f"input '{self.name}' contains NaN or infinity", input_name=self.name)
        else:
            array = self._reshape_by_numel(array)
        return np.ascontiguousarray(array), single

    def _as_array(self, value: object) -> Array:
        try:
            array = np.asarray(value)
        except (ValueError, OverflowError) as exc:
            raise InvalidInput(
                f"input '{self.name}' is not a rectangular array of numbers ({exc})",
                input_name=self.name,
            ) from None
        want = np.dtype(self.dtype)
        if array.dtype.kind not in _ACCEPTED_KINDS.get(want.kind, want.kind):
            got = "strings, mixed values or numbers out of range" if array.dtype.kind in "OUS" else str(array.dtype)
            raise InvalidInput(
                f"input '{self.name}' must hold {want.name} values, got {got}",
                input_name=self.name,
            )
        if array.size == 0:
            raise InvalidInput(f"input '{self.name}' is empty", input_name=self.name)
        try:
            with np.errstate(over="raise"):
                return array.astype(want, copy=False)
        except FloatingPointError:
            raise InvalidInput(
                f"input '{self.name}' has values out of range for {want.name}", input_name=self.name
            ) from None

    def _check_shape(self, array: Array, single: bool) -> None:
        fits = array.ndim == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, array.shape, strict=True)
        )
        if not fits:
            got = list(array.shape[1:] if single else array.shape)
            raise InvalidInput(
                f"input '{self.name}' has shape {got}; expected {self.describe()}"
                + (f" or one sample of {list(self.sample_shape)}" if self.batched else ""),
                input_name=self.name,
            )

    def _reshape_by_numel(self, array: Array) -> Array:
        batch = array.shape[0] if self.batched and array.ndim else 1  # a bare number is one sample's worth
        if array.size != batch * self.sample_numel or any(d is None for d in self.sample_shape):
            raise InvalidInput(
                f"input '{self.name}' has {array.size} elements; expected {self.sample_numel} per sample",
                input_name=self.name,
            )
        shape = (batch, *self.sample_shape) if self.batched else self.shape
        return array.reshape(shape)  # type: ignore[arg-type]


_JSON_TYPES = {"f": "number", "i": "integer", "u": "integer", "b": "boolean"}


def _json_range(dtype: str) -> dict[str, Any]:
    """The values the dtype can hold, so that a schema-valid request is an acceptable one."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        floats = np.finfo(dtype)
        limit = float(floats.max)
        # A JSON number is read as a float64, then cast: whatever rounds to the dtype's largest
        # value is taken (3.402823466385289e38 for float32), up to half its last step, which
        # rounds to infinity (ties to even) and is refused.
        half_step = 2.0 ** (floats.maxexp - 2 - floats.nmant)
        if limit + half_step == float("inf"):  # float64: every finite JSON number fits
            return {"minimum": -limit, "maximum": limit}
        return {"exclusiveMinimum": -(limit + half_step), "exclusiveMaximum": limit + half_step}
    if kind in "iu":
        info = np.iinfo(dtype)
        return {"minimum": int(info.min), "maximum": int(info.max)}
    return {}


@dataclass(frozen=True)
class Schema:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def coerce_inputs(self, given: Mapping[str, object], *, strict: bool) -> tuple[dict[str, Array], bool]:
        """Validate a whole request: names, per-input data, one common batch size."""
        names = [spec.name for spec in self.inputs]
        missing = [n for n in names if n not in given]
        unknown = [n for n in given if n not in names]
        if missing or unknown:
            raise InvalidInput(
                f"inputs must be exactly {names}; missing {missing}, unknown {unknown}",
                input_name=(missing or unknown)[0],
            )
        arrays: dict[str, Array] = {}
        singles: set[bool] = set()
        for spec in self.inputs:
            arrays[spec.name], single = spec.coerce(given[spec.name], strict=strict)
            singles.add(single)
        batches = {a.shape[0] for s, a in zip(self.inputs, arrays.values(), strict=True) if s.batched}
        if len(batches) > 1 or len(singles) > 1:
            raise InvalidInput(f"all inputs must have the same batch size; got {sorted(batches)}")
        return arrays, singles.pop()


def positional(schema: Schema, value: object) -> Mapping[str, object]:
    """A bare array is allowed for single-input models; name it."""
    if isinstance(value, Mapping):
        return value
    if len(schema.inputs) != 1:
        names = [spec.name for spec in schema.inputs]
        raise InvalidInput(f"this model has several inputs; send an object keyed by {names}")
    return {schema.inputs[0].name: value}


def output_names(count: int, given: Sequence[str]) -> tuple[str, ...]:
    if given and len(given) != count:
        raise ValueError(f"the model returns {count} outputs but {len(given)} output names were given")
    return tuple(given) or (("output",) if count == 1 else tuple(f"output_{i}" for i in range(count)))


_squares = np.vdot  # the sum of the squares of any array's values, flattened, in one BLAS call


class QuickInputs:
    """The common request checked in fewer steps: one batched float input, sent whole and
    already in the schema's shape (nested lists from JSON, or an array from v2).

    Gives what ``Schema.coerce_inputs(positional(...))`` gives for such a request, or None
    whenever it is not sure (another layout, NaN, infinity, a value out of the dtype's range,
    anything else): the caller then takes the general path, which answers or refuses as it
    always has, with its words. What it saves per request: the ``np.errstate`` context and the
    ``isfinite`` pass, both replaced by one sum of squares, and the per-input bookkeeping of a
    many-input schema (docs/BENCHMARKS.md, issue 35). The sum is ``np.vdot``: one BLAS call, 0.7
    µs on 64 values against 1.9 for ``abs().max()``, and numpy 2 checks no overflow in it (it does
    in ``ndarray.dot``, which warns: an exception under ``-W error``). A sum of non-negative terms
    is no less than its largest term however it rounds, so a sum no more than the square of the
    dtype's largest value (float64's: the largest value itself, "finite") means every value is
    finite and rounds into range. A NaN, an infinity, a value beyond, or a sum past the bound (a
    float32 array's sums in float32: past ~1.8e19 a value) fails it, and the general path decides."""

    __slots__ = ("_dtype", "_limit", "_ndim", "_one", "_sample", "name")

    def __init__(self, spec: TensorSpec) -> None:
        self.name = spec.name
        self._dtype = np.dtype(spec.dtype)
        self._sample = tuple(d for d in spec.sample_shape if d is not None)
        self._one = (1, *self._sample)
        self._ndim = len(spec.shape)
        largest = float(np.finfo(self._dtype).max)
        # Squared as BLAS squares (one rounded multiply); float64's square would be infinite.
        self._limit = largest * largest if self._dtype.itemsize < 8 else largest

    @classmethod
    def of(cls, schema: Schema) -> QuickInputs | None:
        """The quick check for ``schema``, or None if its requests always take the general path."""
        if len(schema.inputs) != 1:
            return None
        spec = schema.inputs[0]
        dtype = np.dtype(spec.dtype)
        # float16 is left out: an integer above 65504 would overflow it unseen.
        fixed = all(d is not None for d in spec.sample_shape)
        return cls(spec) if spec.batched and fixed and dtype.kind == "f" and dtype.itemsize >= 4 else None

    def __call__(self, value: object) -> tuple[dict[str, Array], bool] | None:
        if type(value) is dict:
            if len(value) != 1 or self.name not in value:
                return None
            value = value[self.name]
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 -- ragged, odd: the general path says what is wrong
            return None
        kind = array.dtype.kind
        if array.size == 0 or kind not in "fiu":
            return None
        if kind == "f":
            try:
                squares = float(_squares(array, array))  # compared as a Python float, not cast to float32
            except RuntimeWarning:  # an overflow, should a numpy ever check vdot's as it checks dot's
                return None
            if not squares <= self._limit:  # NaN compares False too
                return None
        shape = array.shape
        if shape == self._sample:
            array, single = array.reshape(self._one), True
        elif len(shape) == self._ndim and shape[1:] == self._sample:
            single = False
        else:
            return None
        return {self.name: np.ascontiguousarray(array.astype(self._dtype, copy=False))}, single
