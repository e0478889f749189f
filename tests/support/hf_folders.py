"""Tiny random-weight Hugging Face folders, written at test time and offline: each family's
model (hidden 32, 2 layers) with a tokenizer made here (WordPiece from MiniLM's vocabulary for
the BERT-likes; a byte-level BPE or a Unigram trained on a few sentences for the others), as an
embedder (a sentence-transformers folder), a cross-encoder (1 label) or a classifier (3 labels)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "modernbert")
KINDS = ("embedder", "cross-encoder", "classifier")
LABELS = ("negative", "neutral", "positive")
CORPUS = [
    "Serving a transformer on CPUs is mostly a question of batching and thread budgets.",
    "The quick brown fox jumps over the lazy dog.",
    "Ça marche aussi en français, und auf Deutsch.",
    "How do you deploy any reranking model?",
    "Embeddings, rerankers and classifiers are encoders.",
    "A thirteen-word sentence, as an embedding request usually sends, about serving models on CPUs.",
] * 4
TEXTS = [
    "Hi.",
    "The quick brown fox jumps over the lazy dog.",
    "Serving models on CPUs, with batching and thread budgets " * 3,
    "Ça marche aussi en français.",
]
QUERY = "How do I serve a reranking model?"
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def _bert_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from inferpool.engine.zoo.minilm import model_dir

    return AutoTokenizer.from_pretrained(str(model_dir()))


def _wrapped(tokenizer: Any, specials: dict[str, str]) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=126, **specials)


def _bpe(cls: str, sep: str) -> Any:
    """A byte-level BPE with ``cls ... sep`` around each text (RoBERTa's and ModernBERT's kind)."""
    from tokenizers import ByteLevelBPETokenizer, processors

    pad, unk, mask = ("<pad>", "<unk>", "<mask>") if cls == "<s>" else ("[PAD]", "[UNK]", "[MASK]")
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(CORPUS, vocab_size=400, special_tokens=[cls, pad, sep, unk, mask])
    if cls == "<s>":
        tokenizer.post_processor = processors.RobertaProcessing((sep, 2), (cls, 0))
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1", special_tokens=[(cls, 0), (sep, 2)]
        )
    return _wrapped(tokenizer, {"bos_token": cls, "cls_token": cls, "eos_token": sep, "sep_token": sep,
                                "pad_token": pad, "unk_token": unk, "mask_token": mask})  # fmt: skip


def _unigram() -> Any:
    """A SentencePiece-style Unigram with XLM-R's special tokens and templates."""
    from tokenizers import SentencePieceUnigramTokenizer, processors

    tokenizer = SentencePieceUnigramTokenizer()
    tokenizer.train_from_iterator(CORPUS, vocab_size=200, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  unk_token="<unk>")  # fmt: skip
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return _wrapped(tokenizer, {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                                "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"})  # fmt: skip


def tokenizer(family: str) -> Any:
    if family in ("bert", "distilbert", "mpnet"):
        return _bert_tokenizer()
    if family == "roberta":
        return _bpe("<s>", "</s>")
    if family == "modernbert":
        return _bpe("[CLS]", "[SEP]")
    return _unigram()


def config(family: str, vocab: int, pad: int, **extra: Any) -> Any:
    from transformers import AutoConfig

    sizes: dict[str, Any] = dict(SMALL)
    if family == "distilbert":
        sizes = {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}
    if family == "modernbert":
        sizes |= {"global_attn_every_n_layers": 2, "local_attention": 16, "cls_token_id": 0, "sep_token_id": 2,
                  "bos_token_id": 0, "eos_token_id": 2}  # fmt: skip
    positions = 128 if family in ("bert", "distilbert", "modernbert") else 130
    return AutoConfig.for_model(family, vocab_size=vocab, pad_token_id=pad, max_position_embeddings=positions,
                                **sizes, **extra)  # fmt: skip


def write(folder: Path, family: str, kind: str) -> Path:
    """A ``kind`` folder of ``family`` under ``folder`` (seeded weights), returned."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    torch.manual_seed(0)
    tok = tokenizer(family)
    vocab, pad = len(tok), tok.pad_token_id
    path = folder / f"{family}-{kind}"
    if kind == "embedder":
        AutoModel.from_config(config(family, vocab, pad)).save_pretrained(path / "plain")
        tok.save_pretrained(path / "plain")
        return _sentence_transformer(path / "plain", path)
    labels = (LABELS[0],) if kind == "cross-encoder" else LABELS
    id2label = dict(enumerate(labels))
    model_config = config(family, vocab, pad, num_labels=len(labels), id2label=id2label,
                          label2id={v: k for k, v in id2label.items()})  # fmt: skip
    AutoModelForSequenceClassification.from_config(model_config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _sentence_transformer(plain: Path, path: Path) -> Path:
    """A sentence-transformers folder on ``plain``: CLS pooling for some families, mean for the
    others (both paths), normalised."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(plain), max_seq_length=64)
    mode = "cls" if "roberta" in plain.parent.name or "modernbert" in plain.parent.name else "mean"
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=mode)
    model = SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu",
                                prompts={"query": "query: ", "passage": "passage: "})  # fmt: skip
    model.save(str(path))
    return path


@cache
def encode(path: Path, prompt_name: str | None = None) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    return np.asarray(model.encode(TEXTS, prompt_name=prompt_name))


@cache
def cross_encoder_logits(path: Path) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(path), device="cpu")
    return np.asarray(model.predict([(QUERY, text) for text in TEXTS], activation_fn=torch.nn.Identity()))


@cache
def classifier_logits(path: Path) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    with torch.no_grad():
        return model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits.numpy()


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)
