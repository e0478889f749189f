"""What a Hugging Face folder is, from its own JSON files: each kind, and each refusal naming
what was found and what is served (no weights are read: detection only opens JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferpool.config.settings import check_source
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.source_kinds import is_path, kind_of
from inferpool.engine.models.text.folder import detect

BERT = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 32, "max_position_embeddings": 512}


def write_folder(path: Path, config: dict[str, Any] | None = None, files: dict[str, Any] | None = None) -> Path:
    """A folder with config.json, tokenizer.json and weights, plus ``files`` (name -> JSON)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(BERT if config is None else config))
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    for name, value in (files or {}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(value))
    return path


def classifier(labels: int, **extra: Any) -> dict[str, Any]:
    id2label = {str(i): f"label{i}" for i in range(labels)}
    return BERT | {"architectures": ["BertForSequenceClassification"], "id2label": id2label} | extra


ST_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]


def test_a_plain_encoder_is_a_mean_pooled_embedder_limited_by_its_positions(tmp_path):
    found = detect(write_folder(tmp_path / "plain"))
    assert (found.kind, found.pooling, found.normalize, found.dimensions) == ("embedder", "mean", False, 32)
    assert found.max_tokens == 512
    assert found.name == "plain"


def test_a_sentence_transformers_folder_gives_pooling_normalisation_limit_and_prompts(tmp_path):
    path = write_folder(
        tmp_path / "st",
        files={
            "1_Pooling/config.json": {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False},
            "sentence_bert_config.json": {"max_seq_length": 128},
            "config_sentence_transformers.json": {
                "prompts": {"query": "query: ", "passage": "passage: "},
                "default_prompt_name": "query",
                "similarity_fn_name": "dot",
            },
        },
    )
    (path / "modules.json").write_text(json.dumps(ST_MODULES))
    found = detect(path)
    assert (found.kind, found.pooling, found.normalize, found.max_tokens) == ("embedder", "cls", True, 128)
    assert found.prompts == (("query", "query: "), ("passage", "passage: "))
    assert (found.default_prompt, found.similarity) == ("query", "dot")


def test_sentence_transformers_6_names_its_pooling_and_modules_by_class(tmp_path):
    path = write_folder(tmp_path / "st6", files={"1_Pooling/config.json": {"pooling_mode": "lasttoken"}})
    modules = [
        {"path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    found = detect(path)
    assert (found.pooling, found.normalize) == ("lasttoken", False)


def test_roberta_positions_start_after_the_padding_id(tmp_path):
    config = {"architectures": ["RobertaModel"], "model_type": "roberta", "pad_token_id": 1,
              "max_position_embeddings": 514, "hidden_size": 32}  # fmt: skip
    assert detect(write_folder(tmp_path / "r", config)).max_tokens == 512


def test_the_tokenizer_limit_applies_without_sentence_bert_config(tmp_path):
    path = write_folder(tmp_path / "t", files={"tokenizer_config.json": {"model_max_length": 64}})
    assert detect(path).max_tokens == 64


def test_one_label_is_a_cross_encoder(tmp_path):
    found = detect(write_folder(tmp_path / "ce", classifier(1)))
    assert (found.kind, found.labels) == ("cross-encoder", ("label0",))


def test_several_labels_are_a_classifier_softmax_or_sigmoid_for_multi_label(tmp_path):
    found = detect(write_folder(tmp_path / "c", classifier(3)))
    assert (found.kind, found.labels, found.activation) == ("classifier", ("label0", "label1", "label2"), "softmax")
    multi = detect(write_folder(tmp_path / "m", classifier(2, problem_type="multi_label_classification")))
    assert multi.activation == "sigmoid"


@pytest.mark.parametrize(
    ("config", "found"),
    [
        ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, r"decoder language model \(GPT2LMHeadModel"),
        ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, r"decoder language model \(LlamaForCausalLM"),
        ({"architectures": ["T5Model"], "model_type": "t5"}, r"a model of model_type 't5' \(T5Model\)"),
        (BERT | {"architectures": ["BertForTokenClassification"]}, "a BertForTokenClassification"),
    ],
)
def test_refuses_what_is_not_a_supported_encoder_naming_it_and_what_is_served(tmp_path, config, found):
    with pytest.raises(ModelLoadError, match=found) as refused:
        detect(write_folder(tmp_path / "x", config))
    assert "InferPool serves a Hugging Face encoder folder (bert, roberta, xlm-roberta" in str(refused.value)


def test_refuses_a_folder_without_tokenizer_json(tmp_path):
    path = write_folder(tmp_path / "x")
    (path / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"a bert model without tokenizer\.json"):
        detect(path)


def test_refuses_a_folder_without_config_or_weights(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"holds no config\.json"):
        detect(tmp_path / "empty")
    path = write_folder(tmp_path / "x")
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"holds no weights \(model.safetensors"):
        detect(path)


def test_refuses_a_missing_folder_or_a_file_of_no_known_kind(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist; give the path of a Hugging Face model folder"):
        detect(tmp_path / "nowhere")
    (tmp_path / "weights.pt").write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"is a file InferPool does not read: give a model archive \(\.pt2"):
        detect(tmp_path / "weights.pt")


@pytest.mark.parametrize(
    ("modules", "pooling", "found"),
    [
        ([{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}], {}, "module 'sentence_transformers"
         ".models.Dense' \\(supported: Transformer, Pooling, Normalize\\)"),
        ([], {"pooling_mode": "weightedmean"}, "pooling weightedmean in 1_Pooling/config.json"),
        ([], {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, "pooling cls, mean"),
        ([], {"pooling_mode": "mean", "include_prompt": False}, "include_prompt false"),
    ],
)  # fmt: skip
def test_refuses_sentence_transformers_modules_it_does_not_run(tmp_path, modules, pooling, found):
    path = write_folder(tmp_path / "x", files={"1_Pooling/config.json": pooling})
    listed = [*ST_MODULES[:2], *modules]
    (path / "modules.json").write_text(json.dumps(listed))
    with pytest.raises(ModelLoadError, match=found):
        detect(path)


def test_a_folder_is_a_path_source_and_the_config_checks_it_exists(tmp_path):
    path = write_folder(tmp_path / "m")
    assert kind_of(str(path)) == "folder"
    assert is_path(str(path))
    assert is_path("models/missing")
    assert not is_path("pkg.module:build")
    assert check_source(str(path)) == str(path)
    with pytest.raises(ValueError, match="or an existing Hugging Face model folder"):
        check_source(str(tmp_path / "missing"))
