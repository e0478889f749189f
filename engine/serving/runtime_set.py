"""The runtimes of one served model: built on its shared module and artifact, kept full.

``ServedModel`` owns one. Every runtime here shares the module's weights and the backend's
compiled artifact; each holds only its own mutable state. A runtime the model failed on is
replaced by a fresh one while its lease is held (the pool never shrinks and no other thread sees
the swap), and a supervisor can re-size the set before it forks serving processes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from inferpool.engine.backends.base import Runtime
from inferpool.engine.errors import EngineError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.pod_load import PodLoad
from inferpool.engine.plan.wide import WideLane
from inferpool.engine.schema import Array
from inferpool.engine.serving.pool import Lease, RuntimePool

log = logging.getLogger(__name__)


class RuntimeSet:
    def __init__(
        self, name: str, backend: type[Runtime], compiled: Any, module: InferenceModule, options: RuntimeOptions,
        size: int, pod: PodLoad | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.backend, self.compiled = backend, compiled
        self.module = module
        self.options = options
        self._counts = threading.Lock()  # failure paths only
        self.replaced = 0
        """Runtimes replaced by a fresh one after the model raised on them, for metrics."""
        self.failed_replacements = 0
        """Replacements that could not be built or warmed (the old runtime stayed), for metrics."""
        self.pool = self._warm_pool(size)
        self.pod = pod or PodLoad()
        """The calls running in every serving process: a call alone may take the wide lane."""
        self.wide: WideLane | None = None
        """Set where the model gains from every core when it runs alone (inferpool.engine.plan.wide)."""

    def run(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        """One call: on the wide lane when it is the only call running in the pod, none ran beside
        another for a moment and the lane is free, else on a borrowed runtime."""
        pod = self.pod
        if not pod.active:
            return self._run_pooled(arrays)
        alone = pod.enter() == 1
        try:
            wide = self.wide
            if alone and wide is not None and pod.calm(wide.quiet_seconds):
                outputs = wide.try_run(arrays)
                if outputs is not None:
                    return outputs
            return self._run_pooled(arrays)
        finally:
            pod.leave()

    def alone_on_wide_lane(self) -> bool:
        """Whether a call starting now would run alone on the wide lane, every core its own."""
        wide = self.wide
        return wide is not None and self.pod.active and wide.takes_any_call_now(self.pod)

    def _run_pooled(self, arrays: Mapping[str, Array]) -> dict[str, Array]:
        lease = self.pool.borrow()
        with lease as runtime:
            try:
                return runtime.run(arrays)
            except EngineError:
                raise  # the backend refused the input on purpose: the runtime itself is fine
            except BaseException:
                # A failure can leave per-runtime state (buffers, caches, a half-run graph) broken,
                # and nothing proves it did not: that runtime never serves again. Replaced while the
                # lease is held, so the pool stays full and no other thread can see the swap.
                self._replace(lease)
                raise

    def resize(self, size: int) -> None:
        """``size`` runtimes: some dropped, or more built on the shared module and artifact and
        warmed -- no load, no compile. A runtime that fails to build leaves the set as it was."""
        runtimes = list(self.pool.runtimes[:size])
        runtimes += [self._fresh() for _ in range(size - len(runtimes))]
        self.pool = RuntimePool(runtimes, timeout=self.options.borrow_timeout)

    def rebuild_artifact(self, runtimes: int) -> None:
        """A new artifact of this process's own for ``runtimes`` runtimes (a backend that sizes its
        artifact by them reads ``num_runtimes``), and runtimes on it (see ServedModel.start)."""
        self.compiled = self.backend.compile(self.module, replace(self.options, num_runtimes=runtimes))
        self.pool = self._warm_pool(self.pool.size)

    def _fresh(self) -> Runtime:
        """A warm runtime on the shared module and artifact."""
        runtime = self.backend(self.module, self.options, self.compiled)
        runtime.warmup()
        return runtime

    def _warm_pool(self, size: int) -> RuntimePool[Runtime]:
        return RuntimePool([self._fresh() for _ in range(size)], timeout=self.options.borrow_timeout)

    def _replace(self, lease: Lease[Runtime]) -> None:
        """Swap a fresh, warm runtime into ``lease``; the failed request's error waits for it
        (one constructor and ``warmup_iters`` calls), so the next request finds it ready."""
        try:
            fresh = self._fresh()
        except Exception:
            # The model fails on its own example inputs too: a fresh runtime would not serve any
            # better, and the pool must not shrink, so the old one stays.
            log.exception("model %r: could not build a runtime to replace a failed one; keeping it", self.name)
            with self._counts:
                self.failed_replacements += 1
            return
        self.pool.replace(lease, fresh)
        with self._counts:
            self.replaced += 1
        log.warning("model %r: replaced a runtime after the model failed on it", self.name)
