"""Models and where they come from: a source string to an ``InferenceModule``.

- ``sources``: the source string (``package.module:function``, ``.pt2``, ``.ts``, ``.onnx``) to
  a loaded model; ``source_kinds``: the names alone (archive suffixes, the default model), which
  import no torch, for the config.
- ``spec``: ``ModelSpec``, what a factory returns; ``module``: ``InferenceModule``, the model
  with its schema and example inputs, which every backend builds its runtimes from.
- ``onnx_source`` and ``torchscript_archive``: the ``.onnx`` and ``.ts`` loaders.
- ``handlers``: pre- and post-processing around a model.

The built-in models themselves are inferpool.engine.zoo's. Nothing is imported here: importing
one module of this package loads only what that module needs.
"""
