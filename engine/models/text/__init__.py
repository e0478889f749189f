"""Text encoders from a Hugging Face folder: one source kind (a folder path) for embedders,
cross-encoders and classifiers, served on the fast text path (docs/models.md, "Serving a
Hugging Face folder").

- ``folder``: what the folder holds, read from its own JSON files (no torch, no transformers):
  the kind, pooling, limits, labels, prompts, or a refusal naming what was found;
- ``tokenizing``: the folder's fast tokenizer, length buckets and token-id checks;
- ``payloads``: the texts a /predict or v2 request carries;
- ``graphs``: the torch modules per kind, pooling and heads inside the graph;
- ``handlers``: one handler per kind, implementing the text routes' contract (text_api);
- ``loading``: the folder to a ModelSpec carrying its handler.
"""
