"""A Hugging Face folder as a model source: detected (folder), loaded with transformers from its
own files (never downloading), and handed to the engine as a ModelSpec carrying its handler.

The example call is a sentence of real length (EXAMPLE_TEXT), and the held-out inputs for the
accuracy gates (int8, and precision auto's bf16) are HELD_OUT_TEXTS, each tokenized alone as a
one-sentence request is (a cross-encoder's: reranks of a few texts after a short query).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from inferpool.engine.errors import ModelLoadError, import_optional
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.models.text.folder import FolderModel, detect
from inferpool.engine.models.text.graphs import OUTPUTS, graph
from inferpool.engine.models.text.handlers import HANDLERS, FolderHandler
from inferpool.engine.models.text.tokenizing import INSTALL_HINT, Encoded, FolderTokenizer, offline
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)

EXAMPLE_TEXT = "A thirteen-word sentence, as an embedding request usually sends, about serving models on CPUs."
"""The example call's text: 24 tokens for MiniLM, a full 24 bucket, the length of a sentence users
embed. The start-up probes time the example (and ``examples(8)``, its rows repeated: the wide
lane's batch probe); a 6-token "An example sentence." padded to 16 made an 8-sample call a
quarter of the tokens of a 16-sentence request, too little work for a second thread to pay, so
the probe kept the lane off (bf16, beside other work: 7.3 ms narrow, 8.2 ms wide) where a call
of 16 real sentences of 31 tokens gained from it (17.7 -> 11.2 ms)."""
EXAMPLE_QUERY = "serving models on CPUs"
HELD_OUT_FILE = Path(__file__).with_name("held_out_texts.jsonl")
HELD_OUT_TEXTS: list[str] = [json.loads(line)["text"] for line in HELD_OUT_FILE.read_text("utf-8").splitlines() if line]
"""Varied texts for the accuracy gates, one JSON object ``{"text": ...}`` a line: one word to a
paragraph; questions, reviews, news, science, medicine, code and logs, chat and typos,
contracts, poetry, twenty languages and code-switching, numbers and units, emoji, paraphrase
pairs."""


def _encode(handler: FolderHandler, texts: list[str]) -> Encoded:
    if handler.found.kind == "cross-encoder":
        return handler.tokenizer.encode_pairs(EXAMPLE_QUERY, texts)
    return handler.tokenizer.encode(texts)


RERANK_TEXTS = 8
"""Texts per held-out call of a cross-encoder: the gates judge its one score per text by the
call's column of scores (inferpool.engine.backends.gate), so each call is a small rerank."""


def held_out_inputs(handler: FolderHandler) -> list[dict[str, Array]]:
    """Each held-out text alone, as a one-sentence request sends it; a cross-encoder's in
    reranks of RERANK_TEXTS texts after the example query."""
    if handler.found.kind == "cross-encoder":
        calls = [HELD_OUT_TEXTS[i : i + RERANK_TEXTS] for i in range(0, len(HELD_OUT_TEXTS), RERANK_TEXTS)]
        return [_encode(handler, texts).arrays(handler.type_ids) for texts in calls]
    return [_encode(handler, [text]).arrays(handler.type_ids) for text in HELD_OUT_TEXTS]


def folder_handler(found: FolderModel, type_ids: bool = False) -> FolderHandler:
    tokenizer = FolderTokenizer(found.weights, found.max_tokens, found.pad_id, pairs=found.kind == "cross-encoder")
    return HANDLERS[found.kind](found, tokenizer, type_ids)


def load_folder(source: str, name: str | None = None) -> ModelSpec:
    """The folder at ``source`` as a ModelSpec with its handler; ModelLoadError when it is not a
    supported encoder, or transformers is missing."""
    found = detect(Path(source))
    offline()
    import_optional("transformers", "a Hugging Face folder model", INSTALL_HINT)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        module, type_ids = graph(found)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load the model in {source!r} with transformers: {exc}") from exc
    handler = folder_handler(found, type_ids)
    example = _encode(handler, [EXAMPLE_TEXT]).arrays(type_ids)
    log.info("model folder %r: %s", source, found.describe())
    return ModelSpec(
        module=module,
        example_inputs={key: torch.from_numpy(value) for key, value in example.items()},
        output_names=OUTPUTS[found.kind],
        name=name or found.name,
        dynamic_dims={key: (1,) for key in example},
        held_out=held_out_inputs(handler),
        handler=handler,
    )
