"""What a Hugging Face folder holds, read from its own JSON files: the kind of model, its
pooling, limits, labels and prompts, or a refusal naming what was found and what is supported.

No torch and no transformers here: the config checks a folder source with this before any model
loads, and the refusals name files and fields a user can open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from inferpool.engine.errors import ModelLoadError

FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "modernbert")
"""The ``model_type`` values served (each tested against transformers / sentence-transformers)."""
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "mpnet")
"""Families whose positions start after the padding id (padding_idx + 1 of them unused), so that
``max_position_embeddings`` minus that is the longest input."""
DECODER_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
ENCODER_SUFFIXES = ("Model", "ForMaskedLM")
POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "lasttoken",
}
"""sentence-transformers' 1_Pooling/config.json flags (before version 6) to the pooling served;
version 6 writes the name itself (``"pooling_mode": "mean"``). Exactly one is served."""
ST_MODULES = {"Transformer": "transformer", "Pooling": "pooling", "Normalize": "normalize"}
"""sentence-transformers' module classes (by class name: the module path moved in version 6) to
their role."""
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
DEFAULT_POOLING = "mean"
"""A plain transformers encoder folder (no 1_Pooling): mean pooling, as sentence-transformers
gives such a folder."""
SUPPORTED = (
    f"a Hugging Face encoder folder ({', '.join(FAMILIES)}) with tokenizer.json: an embedding model "
    "(a *Model architecture or a sentence-transformers folder), a cross-encoder (*ForSequenceClassification "
    "with 1 label) or a classifier (*ForSequenceClassification with several labels)"
)


@dataclass(frozen=True)
class FolderModel:
    """A folder's model as detected: everything the loader and the handler need."""

    path: Path
    weights: Path
    """The folder holding config.json, the weights and tokenizer.json (a sentence-transformers
    folder's Transformer module path, usually the folder itself)."""
    kind: str
    model_type: str
    architecture: str
    max_tokens: int
    pad_id: int
    dimensions: int
    """The encoder's hidden size: an embedder's vector length."""
    pooling: str = DEFAULT_POOLING
    normalize: bool = False
    """Whether the folder itself normalises (a sentence-transformers Normalize module)."""
    labels: tuple[str, ...] = ()
    activation: Literal["softmax", "sigmoid"] = "softmax"
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt: str | None = None
    similarity: str | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def describe(self) -> str:
        what = {
            "embedder": f"{self.pooling} pooling{', normalised' if self.normalize else ''}"
            f"{f', {len(self.prompts)} prompts' if self.prompts else ''}"
            f"{f', {self.similarity} similarity' if self.similarity else ''}",
            "cross-encoder": "1 relevance score",
            "classifier": f"{len(self.labels)} labels, {self.activation}",
        }[self.kind]
        return f"{self.kind} ({self.architecture}, {self.model_type}; {what}; up to {self.max_tokens} tokens)"


def refuse(path: Path, found: str) -> ModelLoadError:
    return ModelLoadError(f"folder {str(path)!r} holds {found}; InferPool serves {SUPPORTED}")


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {str(path)!r}: {exc}") from exc
    if not isinstance(value, dict | list):
        raise ModelLoadError(f"{str(path)!r} is not a JSON object")
    return value if isinstance(value, dict) else {"modules": value}


def _optional_json(path: Path) -> dict[str, Any]:
    return read_json(path) if path.is_file() else {}


def detect(path: Path) -> FolderModel:
    """The folder's model, or ModelLoadError naming what was found and what is supported."""
    if path.is_file():
        raise ModelLoadError(
            f"model {str(path)!r} is a file InferPool does not read: give a model archive (.pt2, .ts, .onnx), "
            "a Hugging Face model folder, or a 'package.module:function' factory"
        )
    if not path.is_dir():
        raise ModelLoadError(
            f"model folder {str(path)!r} does not exist; give the path of a Hugging Face model folder, or a "
            "factory, which must look like 'package.module:function'"
        )
    modules = _st_modules(path)
    weights = path / modules.get("transformer", "")
    if not (weights / "config.json").is_file():
        raise refuse(path, "no config.json")
    config = read_json(weights / "config.json")
    model_type, architecture = str(config.get("model_type", "")), _architecture(config)
    if architecture.endswith(DECODER_SUFFIXES):
        raise refuse(path, f"a decoder language model ({architecture}, model_type {model_type!r})")
    if model_type not in FAMILIES:
        raise refuse(path, f"a model of model_type {model_type!r} ({architecture or 'no architectures'})")
    if not (weights / "tokenizer.json").is_file():
        raise refuse(path, f"a {model_type} model without tokenizer.json (save a fast tokenizer beside it)")
    if not any((weights / name).is_file() for name in WEIGHTS):
        raise refuse(path, f"no weights ({', '.join(WEIGHTS)})")
    base = FolderModel(
        path=path,
        weights=weights,
        kind="embedder",
        model_type=model_type,
        architecture=architecture or "AutoModel",
        max_tokens=_max_tokens(path, weights, config),
        pad_id=int(config.get("pad_token_id") or 0),
        dimensions=int(config.get("hidden_size") or config.get("dim") or 0),  # DistilBERT: dim
    )
    if architecture.endswith("ForSequenceClassification"):
        labels = _labels(config)
        kind = "cross-encoder" if len(labels) == 1 else "classifier"
        multi = config.get("problem_type") == "multi_label_classification"
        return replace(base, kind=kind, labels=labels, activation="sigmoid" if multi else "softmax")
    if architecture and not architecture.endswith(ENCODER_SUFFIXES):
        raise refuse(path, f"a {architecture} (a head InferPool does not serve)")
    st = _optional_json(path / "config_sentence_transformers.json")
    prompts = st.get("prompts") or {}
    return replace(
        base,
        pooling=_pooling(path, modules),
        normalize="normalize" in modules,
        prompts=tuple((str(name), str(prefix)) for name, prefix in prompts.items()),
        default_prompt=st.get("default_prompt_name") or None,
        similarity=st.get("similarity_fn_name") or None,
    )


def _architecture(config: dict[str, Any]) -> str:
    architectures = config.get("architectures") or []
    return str(architectures[0]) if architectures else ""


def _st_modules(path: Path) -> dict[str, str]:
    """sentence-transformers' modules.json: each module's role to its folder; refuses a module
    InferPool does not run (Dense, LayerNorm, ...)."""
    listed = _optional_json(path / "modules.json").get("modules", [])
    found = {}
    for module in listed:
        role = ST_MODULES.get(str(module.get("type")).rpartition(".")[2])
        if role is None:
            raise refuse(path, f"a sentence-transformers module {module.get('type')!r} (supported: Transformer, "
                         "Pooling, Normalize)")  # fmt: skip
        found[role] = str(module.get("path", ""))
    return found


def _pooling(path: Path, modules: dict[str, str]) -> str:
    if "pooling" not in modules:
        return DEFAULT_POOLING
    config = read_json(path / modules["pooling"] / "config.json")
    named = config.get("pooling_mode", [])
    chosen = [named] if isinstance(named, str) else [str(mode) for mode in named]
    chosen += sorted(POOLING_MODES.get(k, k.removeprefix("pooling_mode_")) for k, v in config.items()
                     if k.startswith("pooling_mode_") and v is True)  # fmt: skip
    served = set(POOLING_MODES.values())
    if len(chosen) != 1 or chosen[0] not in served or config.get("include_prompt") is False:
        found = ", ".join(chosen) or "no pooling mode"
        if config.get("include_prompt") is False:
            found += ", include_prompt false"
        raise refuse(path, f"pooling {found} in {modules['pooling']}/config.json (supported: one of "
                     f"{', '.join(sorted(served))}, prompt included)")  # fmt: skip
    return chosen[0]


def _labels(config: dict[str, Any]) -> tuple[str, ...]:
    id2label = config.get("id2label") or {}
    count = int(config.get("num_labels") or len(id2label) or 2)
    return tuple(str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count))


def _max_tokens(path: Path, weights: Path, config: dict[str, Any]) -> int:
    """The longest input, special tokens included: sentence-transformers' max_seq_length, else
    the tokenizer's model_max_length, within what the position embeddings hold."""
    offset = int(config.get("pad_token_id") or 0) + 1 if config["model_type"] in OFFSET_POSITIONS else 0
    positions = int(config.get("max_position_embeddings") or 512) - offset
    declared = _optional_json(path / "sentence_bert_config.json").get("max_seq_length")
    if declared is None:
        declared = _optional_json(weights / "tokenizer_config.json").get("model_max_length")
    if isinstance(declared, int | float) and 0 < declared < positions:
        return int(declared)
    return positions
