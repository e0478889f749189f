"""The onnxruntime backend: the export of a model to ONNX and its cache (``export``, which the
openvino backend and int8 quantization read too) and the runtime over an ``InferenceSession``
(``runtime``). Nothing is imported here, so that the export never loads the runtime."""
