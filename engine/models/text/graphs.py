"""The torch modules a folder is served as, one per kind, with pooling and heads inside the
graph so that every backend (ONNX, OpenVINO, AOTInductor, ...) runs the whole computation.

Inputs: ``input_ids`` and ``attention_mask`` (int64, [batch, sequence], both dynamic), and
``token_type_ids`` for a cross-encoder whose model reads segments (BERT's pairs).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from inferpool.engine.models.text.folder import FolderModel


def _cls(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden[:, 0]


def _mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def _max(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    padding = (mask.unsqueeze(-1) == 0).expand(hidden.shape)
    return hidden.masked_fill(padding, torch.finfo(hidden.dtype).min).max(1).values


def _last_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Padding is on the right: the last real token is at (its count - 1).
    last = (mask.sum(1) - 1).clamp(min=0)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


POOLINGS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cls": _cls,
    "mean": _mean,
    "max": _max,
    "lasttoken": _last_token,
}


class PooledEncoder(torch.nn.Module):
    """An embedder: the encoder's last hidden state pooled (``pooled_embedding``). The handler
    normalises it (in float32, whatever precision the graph ran in): one output serves both the
    unit vectors and TEI's ``normalize: false``."""

    def __init__(self, encoder: torch.nn.Module, pooling: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.pool = POOLINGS[pooling]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.pool(hidden, attention_mask)


class SequenceScorer(torch.nn.Module):
    """A classifier's logits [batch, labels], or a cross-encoder's one score [batch]."""

    def __init__(self, model: torch.nn.Module, squeeze: bool) -> None:
        super().__init__()
        self.model = model
        self.squeeze = squeeze

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits[:, 0] if self.squeeze else logits


class SegmentedScorer(SequenceScorer):
    """A cross-encoder whose model reads which tokens are the query's and which the text's."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits: torch.Tensor = out.logits
        return logits[:, 0]


OUTPUTS = {
    "embedder": ("pooled_embedding",),  # "embedding" clashes with a node name in ONNX
    "cross-encoder": ("score",),
    "classifier": ("logits",),
}


def reads_segments(model: torch.nn.Module, found: FolderModel) -> bool:
    """Whether a cross-encoder's pairs need token_type_ids (BERT's two segments)."""
    types = int(getattr(getattr(model, "config", None), "type_vocab_size", 0) or 0)
    accepts = "token_type_ids" in inspect.signature(model.forward).parameters
    return found.kind == "cross-encoder" and accepts and types > 1


def graph(found: FolderModel) -> tuple[torch.nn.Module, bool]:
    """The folder's weights as the module served, and whether it takes token_type_ids."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    if found.kind == "embedder":
        encoder = AutoModel.from_pretrained(str(found.weights), local_files_only=True)
        return PooledEncoder(encoder, found.pooling), False
    model = AutoModelForSequenceClassification.from_pretrained(str(found.weights), local_files_only=True)
    if reads_segments(model, found):
        return SegmentedScorer(model, squeeze=True), True
    return SequenceScorer(model, squeeze=found.kind == "cross-encoder"), False
