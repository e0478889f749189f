"""``static``: our own Static Runtime on torch.export graphs.

``plan`` compiles the exported graph into an immutable plan (``ops`` picks each node's
callables), ``codegen`` turns a plan into straight-line Python, ``memory`` plans a runtime's
buffers, and ``runtime`` is the backend: the shared model and the per-worker ``StaticRuntime``.
"""

from inferpool.engine.backends.static.runtime import StaticModel, StaticRuntime

__all__ = ["StaticModel", "StaticRuntime"]
