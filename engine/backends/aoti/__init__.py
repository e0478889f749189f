"""``aoti``: the model compiled ahead of time by AOTInductor, one package per batch size.

``compile`` exports and compiles the packages (cached by content hash), ``abi`` is the
compiled library's C ABI through ctypes, ``runners`` loads a package once and makes each
runtime's caller, and ``runtime`` is the backend: the shared artifact and the per-worker
``AotiRuntime``. Importing this package opens libtorch through ctypes (``abi``), which is why
the backend table (inferpool.engine.backends) names it by an import string.
"""

from inferpool.engine.backends.aoti.runtime import AotiArtifact, AotiRuntime

__all__ = ["AotiArtifact", "AotiRuntime"]
