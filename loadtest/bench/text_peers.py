"""Hugging Face encoder folders served by InferPool against Infinity, same folders, same bodies.

    python -m loadtest.bench text_peers [--infinity-python /tmp/venv-infinity/bin/python]
                                        [--rounds 3 --seconds 4 --concurrency 1,8,32]

Two seeded folders, written once under ``--folders`` (default: a directory under /tmp) with
all-MiniLM-L6-v2's real tokenizer:

- ``bge-small-seeded``: a bge-small-sized embedder (BERT, 12 layers, 384 wide, CLS pooling,
  normalised), a sentence-transformers folder;
- ``minilm-ce-seeded``: a MiniLM-L6-sized cross-encoder (BERT, 6 layers, 384 wide, one label).

Both servers answer the same bodies on the same routes (Infinity with ``--url-prefix /v1``):
``POST /v1/embeddings`` with one sentence (``--mixed``: one of 16 of 3-60 words in turn),
``POST /v1/rerank`` with one query and 16 documents.
Infinity runs its strongest CPU engine (``optimum``: ONNX Runtime), one process (it has no
option for more), its result cache off (InferPool's response cache is off by default too).
Both servers run at once, idle while the other is measured; wrk drives each in turn, the order
alternating per round, and the table gives medians over rounds of req/s and p99.

Infinity's optimum engine loads an ONNX file from the folder and exports none itself, so each
folder gets a copy for it beside the original, exported by optimum-cli (``<name>-infinity``).
It is started from inside that copy with ``--model-id .``: Infinity 0.0.78 hands optimum 2.1 the
ONNX file's path as the folder lists it, and optimum wants it relative to the folder.
BetterTransformer is off: it needs transformers < 4.49, which optimum 2.1 does not support.

Infinity needs its own venv (numpy < 2, transformers 4), never the product's:

    python3 -m venv /tmp/venv-infinity
    /tmp/venv-infinity/bin/pip install torch==2.13.0 'infinity-emb[server,optimum]==0.0.78'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inferpool.harness.payloads import JSON, Payload
from inferpool.harness.server import Server, inferpool_serve, launch
from loadtest.wrk import run_one

SENTENCE = "A thirteen-word sentence, as an embedding request usually sends, about serving models on CPUs."
QUERY = "how do I serve a model on CPUs?"
DOCUMENTS = [f"Document {i}: {SENTENCE[: 40 + 3 * i]}" for i in range(16)]
FOLDERS = {"bge-small-seeded": "embed", "minilm-ce-seeded": "rerank"}
TASKS = {"embed": "feature-extraction", "rerank": "text-classification"}
MIXED_WORDS = (3, 41, 8, 60, 13, 27, 5, 19, 50, 10, 33, 16, 6, 24, 13, 9)
MIXED = [" ".join((SENTENCE.split() * 5)[:words]) for words in MIXED_WORDS]
"""Sentences of 3-60 words, one per request in turn: requests spread over several length buckets."""
SENTENCE_TRANSFORMERS_FILES = (
    "modules.json", "1_Pooling", "2_Normalize", "sentence_bert_config.json", "config_sentence_transformers.json"
)  # fmt: skip


def text_peers_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench text_peers", description=__doc__.split("\n")[0])
    parser.add_argument("--infinity-python", default="/tmp/venv-infinity/bin/python")
    parser.add_argument("--folders", type=Path, default=Path(tempfile.gettempdir()) / "inferpool-text-folders")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--only", default=",".join(FOLDERS), help="folders to run, comma-separated")
    parser.add_argument("--inferpool-args", default="", help="more `inferpool serve` flags, space-separated")
    parser.add_argument(
        "--mixed", action="store_true", help=f"embed one of {len(MIXED)} sentences of 3-60 words in turn, not one"
    )
    return parser


def build_folders(root: Path) -> dict[str, Path]:
    """The two seeded folders (written once; kept for the next run)."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    from inferpool.engine.zoo.minilm import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    shape = {"vocab_size": tokenizer.vocab_size, "hidden_size": 384, "num_attention_heads": 12}
    paths = {name: root / name for name in FOLDERS}
    embedder, cross = paths["bge-small-seeded"], paths["minilm-ce-seeded"]
    if not (embedder / "modules.json").is_file():
        torch.manual_seed(0)
        encoder = embedder.with_name(embedder.name + "-encoder")
        BertModel(BertConfig(num_hidden_layers=12, intermediate_size=1536, **shape)).save_pretrained(encoder)
        tokenizer.save_pretrained(encoder)
        word = models.Transformer(str(encoder), max_seq_length=512)
        pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="cls")
        SentenceTransformer(modules=[word, pooling, models.Normalize()]).save(str(embedder))
    if not (cross / "config.json").is_file():
        torch.manual_seed(1)
        config = BertConfig(num_hidden_layers=6, intermediate_size=1536, num_labels=1, **shape)
        BertForSequenceClassification(config).save_pretrained(cross)
        tokenizer.save_pretrained(cross)
    return paths


def infinity_copy(name: str, folder: Path, infinity_python: str) -> Path:
    """The folder with the ONNX export Infinity's optimum engine loads (made once)."""
    copy = folder.with_name(folder.name + "-infinity")
    if (copy / "model.onnx").is_file():
        return copy
    cli = Path(infinity_python).parent / "optimum-cli"
    task = TASKS[FOLDERS[name]]
    argv = [str(cli), "export", "onnx", "--model", str(folder), "--task", task, "--library-name", "transformers"]
    subprocess.run([*argv, str(copy)], check=True, capture_output=True, timeout=900)
    for item in SENTENCE_TRANSFORMERS_FILES:
        source = folder / item
        if source.is_dir():
            shutil.copytree(source, copy / item, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copy2(source, copy / item)
    return copy


def body(name: str, mixed: bool = False) -> Payload:
    if FOLDERS[name] == "embed":
        texts = MIXED if mixed else [SENTENCE]
        first, *rest = [json.dumps({"model": name, "input": [text]}).encode() for text in texts]
        return Payload("/v1/embeddings", first, (JSON,), variants=tuple(rest))
    content = {"model": name, "query": QUERY, "documents": DOCUMENTS}
    return Payload("/v1/rerank", json.dumps(content).encode(), (JSON,))


@contextlib.contextmanager
def servers(name: str, folder: Path, infinity_python: str, flags: list[str]) -> Iterator[dict[str, Server]]:
    infinity = Path(infinity_python).parent / "infinity_emb"
    onnx = infinity_copy(name, folder, infinity_python)
    pooling = ["--pooling-method", "cls"] if FOLDERS[name] == "embed" else []
    infinity_args = [
        str(infinity), "v2", "--model-id", ".", "--served-model-name", name, "--engine", "optimum",
        "--device", "cpu", "--url-prefix", "/v1", "--no-vector-disk-cache", "--no-bettertransformer",
        *pooling, "--host", "127.0.0.1", "--log-level", "warning",
    ]  # fmt: skip
    with (
        launch(inferpool_serve("--model", str(folder), *flags), name=f"inferpool {name}", ready_timeout=600) as ours,
        launch(
            lambda port: [*infinity_args, "--port", str(port)],
            name=f"infinity {name}",
            ready_path="/health",  # unprefixed; it answers once the model is loaded (lifespan)
            ready_timeout=600,
            cwd=onnx,
            env={"HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"},
        ) as theirs,
    ):
        yield {"InferPool": ours, "Infinity": theirs}


def text_peers(argv: list[str] | None = None) -> int:
    args = text_peers_parser().parse_args(argv)
    paths = build_folders(args.folders)
    levels = [int(c) for c in args.concurrency.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="text-peers-"))
    for name in args.only.split(","):
        payload = body(name, args.mixed)
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
        with servers(name, paths[name], args.infinity_python, args.inferpool_args.split()) as running:
            for level in levels:
                for round_ in range(args.rounds):
                    order = list(running) if round_ % 2 == 0 else list(reversed(running))
                    for label in order:
                        server = running[label]
                        found = run_one(
                            server.url, payload, level, duration=args.seconds, warmup=1.0, label=label,
                            server_pid=server.process.pid, scratch=scratch,
                        )  # fmt: skip
                        runs.setdefault((label, level), []).append(found)
        print(f"\n{name} ({payload.path}), medians of {args.rounds} interleaved rounds of {args.seconds:g} s")
        print("| connections | InferPool req/s | Infinity req/s | ratio | InferPool p99 ms | Infinity p99 ms |")
        print("|---|---|---|---|---|---|")
        for level in levels:
            rps = {k: statistics.median(r["achieved_rps"] for r in runs[(k, level)]) for k in ("InferPool", "Infinity")}
            p99 = {k: statistics.median(r["latency_ms"]["p99"] for r in runs[(k, level)]) for k in rps}
            ratio = rps["InferPool"] / rps["Infinity"] if rps["Infinity"] else float("inf")
            print(
                f"| {level} | {rps['InferPool']:.0f} | {rps['Infinity']:.0f} | {ratio:.2f}x | "
                f"{p99['InferPool']:.1f} | {p99['Infinity']:.1f} |"
            )
    return 0
