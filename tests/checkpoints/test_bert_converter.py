"""kbert.checkpoints.bert_converter: tiny random `transformers` models of the
BERT-style families, saved locally, imported, and compared output for output."""

import keras
import pytest
from bert_family_checkpoints import (
    FAMILIES,
    TOLERANCE,
    compare,
    randomize,
    rewrite_tensors,
    tiny_model,
    transformers,
    write_config,
)

import kbert
from kbert.checkpoints.bert_converter import BertConverter, bert_arguments
from kbert.checkpoints.registry import converter_for


@pytest.mark.fast_paths_both_ways
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_outputs_match_transformers(family, tmp_path):
    hf_model = tiny_model(family)
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path)

    assert isinstance(backbone, kbert.models.Encoder)
    assert backbone.use_pooler == (family in ("bert", "roberta", "albert"))
    sequence_diff, pooled_diff = compare(hf_model, backbone, pad_id=FAMILIES[family][3])
    print(
        f"{keras.backend.backend()} {family}: max abs diff sequence "
        f"{sequence_diff:.2e}, pooled {pooled_diff}"
    )
    assert sequence_diff <= TOLERANCE
    if backbone.use_pooler:
        assert pooled_diff <= TOLERANCE


def test_config_mapping(tmp_path):
    tiny_model("roberta", pad_token_id=3, hidden_act="gelu_new").save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path)
    assert backbone.position_offset == 4
    assert backbone.num_segments == 1
    assert backbone.activation == "gelu_approximate"
    assert backbone.layer_norm_epsilon == 1e-5
    assert backbone.max_positions == 64


@pytest.mark.parametrize(
    "hidden_act, activation",
    [("gelu", "gelu"), ("gelu_python", "gelu"), ("gelu_fast", "gelu_approximate"), ("swish", "silu")],
)
def test_activation_names_resolve_through_kbert_layers(hidden_act, activation):
    config = dict(FAMILIES["bert"][2], hidden_act=hidden_act)
    assert bert_arguments(config)["activation"] == activation


def test_albert_shares_one_block(tmp_path):
    tiny_model("albert").save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path)
    assert backbone.share_layers and backbone.num_layers == 3
    assert len({id(layer) for layer in backbone.transformer_layers}) == 1
    assert backbone.embedding_dim == 16


@pytest.mark.parametrize(
    "family, model_class, has_pooler",
    [
        ("bert", "BertForMaskedLM", False),
        ("bert", "BertForSequenceClassification", True),
        ("roberta", "RobertaForMaskedLM", False),
        ("albert", "AlbertForMaskedLM", False),
        ("albert", "AlbertForSequenceClassification", True),
        ("electra", "ElectraForPreTraining", False),
        ("distilbert", "DistilBertForSequenceClassification", False),
    ],
)
def test_task_checkpoint_loads_backbone(family, model_class, has_pooler, tmp_path):
    hf_model = tiny_model(family, model_class)
    hf_model.save_pretrained(tmp_path)
    backbone = kbert.from_huggingface(tmp_path)
    assert backbone.use_pooler == has_pooler
    assert converter_for(family).task_prefix == hf_model.base_model_prefix + "."
    base = getattr(hf_model, hf_model.base_model_prefix)
    sequence_diff, pooled_diff = compare(base, backbone, pad_id=FAMILIES[family][3])
    assert sequence_diff <= TOLERANCE
    if has_pooler:
        assert pooled_diff <= TOLERANCE


@pytest.mark.parametrize("prefix", ["XLMRoberta", "Camembert"])
def test_roberta_architecture_aliases(prefix, tmp_path):
    config = getattr(transformers, prefix + "Config")(**FAMILIES["roberta"][2])
    hf_model = randomize(getattr(transformers, prefix + "Model")(config))
    hf_model.save_pretrained(tmp_path)
    assert converter_for(config.model_type) is converter_for("roberta")
    backbone = kbert.from_huggingface(tmp_path)
    sequence_diff, pooled_diff = compare(hf_model, backbone, pad_id=config.pad_token_id)
    assert sequence_diff <= TOLERANCE and pooled_diff <= TOLERANCE


def test_distilbert_sinusoidal_table_from_checkpoint(tmp_path):
    hf_model = tiny_model("distilbert", sinusoidal_pos_embds=True)
    hf_model.save_pretrained(tmp_path)
    assert compare(hf_model, kbert.from_huggingface(tmp_path))[0] <= TOLERANCE
    name = "embeddings.position_embeddings.weight"
    rewrite_tensors(tmp_path, lambda t: {k: v for k, v in t.items() if k != name})
    with pytest.raises(ValueError, match=r"sinusoidal_pos_embds=True.*position_embeddings"):
        kbert.from_huggingface(tmp_path)


def test_a_family_without_pooler_weights_refuses_a_pooler(tmp_path):
    tiny_model("electra").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no pooler weights; build the model with use_pooler=False"):
        kbert.from_huggingface(tmp_path, use_pooler=True)


def test_every_bert_style_model_type_has_its_converter():
    for model_type in ("bert", "roberta", "xlm-roberta", "camembert", "albert", "electra", "distilbert"):
        converter = converter_for(model_type)
        assert isinstance(converter, BertConverter) and model_type in converter.model_types
    assert "{i}" not in converter_for("albert").block  # one shared block


@pytest.mark.parametrize(
    "family, option, message",
    [
        ("bert", dict(position_embedding_type="relative_key"), "position_embedding_type"),
        ("bert", dict(is_decoder=True), "is_decoder"),
        ("albert", dict(num_hidden_groups=2), "num_hidden_groups=2"),
        ("albert", dict(inner_group_num=2), "inner_group_num=2"),
        ("albert", dict(embedding_size=32), "embedding_size == hidden_size"),
        ("electra", dict(hidden_act="quick_gelu"), "quick_gelu"),
    ],
)
def test_unsupported_config_options(family, option, message, tmp_path):
    write_config(tmp_path, model_type=family, **{**FAMILIES[family][2], **option})
    with pytest.raises(ValueError, match=message):
        kbert.from_huggingface(tmp_path)
