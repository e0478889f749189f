"""The runtime contract every backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from inferpool.engine.backends.parity import Tolerance
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.threads import ThreadPlan
from inferpool.engine.schema import Array


class Runtime(ABC):
    """Per-worker mutable state for running one InferenceModule.

    A runtime is used by one thread at a time (the pool guarantees it); everything shared
    lives in the InferenceModule. ``run`` takes contiguous arrays already checked against
    the schema and returns arrays keyed by output name.
    """

    shared: ClassVar[tuple[str, type] | None] = None
    """For backends with a shared artifact: its name in errors and its type. A runtime built
    without it would load its own (each runtime its own weights), so that is refused."""

    tolerance: ClassVar[Tolerance] = Tolerance(rtol=1e-4, atol=1e-5)
    """How far its float outputs may stray from eager PyTorch's in the parity checks
    (inferpool.engine.backends.parity): rounding of the same kernels by default."""

    threaded_artifact: ClassVar[bool] = False
    """The shared artifact starts threads of its own when ``intra_op_threads`` > 1 (an ORT
    session's pool): threads a process forked after ``compile`` does not have."""

    eager_kernels: ClassVar[bool] = False
    """It runs eager's ATen kernels and beats eager only by their dispatch (static): on a call
    long enough for the kernels to dominate it cannot beat a backend that beats eager by far, so
    ``auto`` does not compile it there (inferpool.engine.backends.autoselect)."""

    wide_artifact_supported: ClassVar[bool] = False
    """``wide_artifact`` builds an artifact for more intra-op threads in the serving process
    (inferpool.engine.plan.wide: the lane a call running alone in the pod takes)."""
    wide_precisions: ClassVar[tuple[str, ...]] = ("fp32", "auto")
    """The ``runtime.precision`` values whose served artifact ``wide_artifact`` builds again
    (``auto`` serves fp32 on a backend that runs no reduced precision)."""
    wide_probe_apart: ClassVar[bool] = False
    """A process that ran the wide artifact cannot fork serving processes that build their own
    (openvino's thread pool: they hang in it). A process that forks later then measures the wide
    lane in a fresh one (``wide_seconds_apart``) and never builds it itself."""

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        if self.shared is not None:
            what, kind = self.shared
            if compiled is None or not isinstance(compiled, kind):
                name = type(self).__name__
                raise TypeError(f"{name} needs the shared {what}: pass compiled={name}.compile(module, options)")
        self.module = module
        self.options = options
        self.compiled = compiled
        self.calls = 0

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> Any:
        """Build the backend's shared, read-only artifact (an exported graph, a compiled
        package, an inference session) once per model; every runtime gets the same object,
        so its weights exist once. ``eager`` needs none."""
        return None

    @classmethod
    def wide_artifact(cls, module: InferenceModule, options: RuntimeOptions, threads: int) -> Any:
        """The shared artifact again, built to run one call on ``threads`` intra-op threads."""
        raise NotImplementedError(f"{cls.__name__} builds no wide artifact")

    @classmethod
    def wide_seconds_apart(
        cls, module: InferenceModule, options: RuntimeOptions, threads: int, examples: Sequence[Mapping[str, Array]],
        repeats: int, timeout: float,
    ) -> list[tuple[float, float]]:  # fmt: skip
        """``wide_probe_apart``: the narrow (one thread) and the wide artifact's median seconds on
        each of ``examples`` (after one warm call each, ``repeats`` calls each, alternating),
        measured in a process of its own that is gone when this returns; ``ModelLoadError`` when
        it fails or takes over ``timeout`` seconds."""
        raise NotImplementedError(f"{cls.__name__} measures its wide artifact in this process")

    @classmethod
    def needs_own_artifact(cls, compiled: Any, plan: ThreadPlan, *, forked: bool) -> bool:
        """``ServedModel.start``: whether this process must build its own artifact for ``plan``
        rather than serve the one it was loaded with (``forked``: inherited from the parent). By
        default only a forked process whose plan wants intra-op threads the parent's artifact
        left behind (``threaded_artifact``)."""
        return forked and cls.threaded_artifact and plan.intra_op_threads > 1

    @abstractmethod
    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]: ...

    def warmup(self) -> None:
        for _ in range(self.options.warmup_iters):
            self.run(self.module.example_inputs)
