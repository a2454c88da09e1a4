"""The sublayer names other packages read off the layers still resolve.

A sublayer's attribute name is its Keras name, so one name serves both the
converters (attribute paths, `attention_layer.query_dense`) and the variable
paths that `kbert.distribute` and `to_long_context` match
(`transformer_layer_0/attention_layer/query_dense/kernel`).

Tiny models of every family are built the way the converters build them; the
test then checks, naming the culprit, that

- every converter entry (attribute path) resolves and every variable gets a
  Hugging Face name;
- every layout-map rule of `kbert.distribute` shards exactly the variables it
  should (found here by attribute path, independently of the Keras names);
- `to_long_context` finds the local projection behind each global one.
"""

import re

import keras
import numpy as np
import pytest

import kbert.checkpoints  # noqa: F401  (registers the converters)
from kbert import distribute
from kbert.checkpoints.registry import converter_for, supported_model_types
from kbert.models.long_context import to_long_context

_BERT = dict(
    vocab_size=30,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=32,
)
# One tiny config per registered model_type: a new converter needs one here.
TINY_CONFIGS = {
    "bert": _BERT,
    "roberta": dict(_BERT, type_vocab_size=1),
    "xlm-roberta": dict(_BERT, type_vocab_size=1),
    "camembert": dict(_BERT, type_vocab_size=1),
    "roberta-prelayernorm": dict(_BERT, type_vocab_size=1),
    "albert": dict(_BERT, embedding_size=4),
    "electra": dict(_BERT, embedding_size=4),
    "distilbert": dict(vocab_size=30, dim=8, n_layers=2, n_heads=2, hidden_dim=16),
    "big_bird": dict(_BERT, block_size=2, num_random_blocks=1),
    "longformer": dict(_BERT, type_vocab_size=1, attention_window=4),
    "gpt2": dict(vocab_size=30, n_embd=8, n_layer=2, n_head=2, n_positions=32, eos_token_id=29),
    "t5": dict(
        vocab_size=30,
        d_model=8,
        d_kv=4,
        d_ff=16,
        num_layers=1,
        num_heads=2,
        feed_forward_proj="gated-gelu",  # v1.1: a gate and an untied lm_head
        tie_word_embeddings=False,
    ),
    "bart": dict(
        vocab_size=30,
        d_model=8,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_position_embeddings=32,
    ),
    "xlnet": dict(vocab_size=30, d_model=8, n_layer=2, n_head=2, d_inner=16),
}
# The families whose sharding is checked.
SHARDED = ("bert", "albert", "longformer", "big_bird", "t5")
COLUMNS, ROWS, VECTOR = (None, "model"), ("model", None), ("model",)


def build(model_type):
    converter = converter_for(model_type)
    return converter.backbone_class(**converter.config_to_arguments(TINY_CONFIGS[model_type]))


@pytest.fixture(scope="module")
def models():
    return {model_type: build(model_type) for model_type in SHARDED}


def test_every_model_type_has_a_tiny_config():
    assert sorted(TINY_CONFIGS) == supported_model_types()


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_converter_entries_resolve(model_type):
    converter = converter_for(model_type)
    backbone = build(model_type)
    try:
        tensor_names = converter.weight_names(backbone, {})
    except AttributeError as error:  # names the converter entry
        pytest.fail(str(error))
    unnamed = [v.path for v in backbone.weights if v.path not in tensor_names]
    assert not unnamed, f"{converter!r} gives no Hugging Face name to {unnamed}"
    stale = sorted(set(tensor_names) - {v.path for v in backbone.weights})
    assert not stale, f"{converter!r} names variables the model does not have: {stale}"


def _at(owner, path):
    for name in path.split("."):
        owner = getattr(owner, name)
    return owner


def _attention_entries(path, attention, bias):
    """`(sublayer path, variable name, layout)` of an attention layer's split variables."""
    global_ = ("query_global_dense", "key_global_dense", "value_global_dense")
    projections = ["query_dense", "key_dense", "value_dense"]
    entries = []
    for projection in projections + [name for name in global_ if hasattr(attention, name)]:
        entries.append((f"{path}.{projection}", "kernel", COLUMNS))
        if bias:
            entries.append((f"{path}.{projection}", "bias", VECTOR))
    return entries + [(f"{path}.output_dense", "kernel", ROWS)]


def _block_entries(block, attentions, bias):
    """The same for a block: its attention layers and its feed-forward network."""
    entries = []
    for attention in attentions:
        entries += _attention_entries(attention, _at(block, attention), bias)
    entries.append(("intermediate_dense", "kernel", COLUMNS))
    if bias:
        entries.append(("intermediate_dense", "bias", VECTOR))
    if getattr(block, "gate_dense", None) is not None:
        entries.append(("gate_dense", "kernel", COLUMNS))
    return entries + [("output_dense", "kernel", ROWS)]


def expected_layouts(model):
    """`{variable path: (attribute path, layout)}` of the variables that should be split,
    found by attribute (every other variable is replicated)."""
    if hasattr(model, "transformer_layers"):  # an Encoder
        top = [("embeddings.token_embedding", "embeddings", COLUMNS)]
        stacks = [("transformer_layers", ["attention_layer"], True)]
    else:  # a T5
        top = [("token_embedding", "embeddings", COLUMNS), ("lm_head", "kernel", ROWS)]
        stacks = [
            ("encoder_layers", ["self_attention"], False),
            ("decoder_layers", ["self_attention", "cross_attention"], False),
        ]
    owned = [(model, "", entry) for entry in top]
    for stack, attentions, bias in stacks:
        for i, block in enumerate(_at(model, stack)):
            owned += [(block, f"{stack}[{i}].", e) for e in _block_entries(block, attentions, bias)]
    layouts = {}
    for owner, prefix, (path, leaf, layout) in owned:
        variable = getattr(_at(owner, path), leaf)
        layouts.setdefault(variable.path, (f"{prefix}{path}.{leaf}", layout))
    return layouts


def _rules_matching(path):
    return [pattern for pattern, _ in distribute.SHARDING_RULES if re.fullmatch(pattern, path)]


@pytest.mark.parametrize("model_type", SHARDED)
def test_sharding_rules_split_what_they_should(model_type, models):
    model = models[model_type]
    layout = distribute.layout_map(model, distribute.device_mesh(1, devices=["cpu:0"]))
    expected = expected_layouts(model)
    wrong = []
    for variable in model.weights:
        attribute, axes = expected.get(variable.path, ("replicated", None))
        found = layout[variable.path]
        found = None if found is None else tuple(found.axes)
        if found != axes:
            wrong.append(
                f"{variable.path} ({attribute}): should be {axes}, the layout map gives "
                f"{found} (rules matching: {_rules_matching(variable.path) or 'none'})"
            )
    assert not wrong, f"{model_type}: " + "; ".join(wrong)


def test_every_sharding_rule_matches_some_variable(models):
    paths = [variable.path for model in models.values() for variable in model.weights]
    unused = [
        pattern
        for pattern, _ in distribute.SHARDING_RULES
        if not any(re.fullmatch(pattern, path) for path in paths)
    ]
    assert not unused, f"layout-map rules that match no variable of the tiny {SHARDED} models: {unused}"


def test_long_context_starts_each_global_projection_from_the_local_one():
    short = build("roberta")
    long = to_long_context(short, max_length=60, attention_kwargs={"window": 2})
    pairs = (
        ("query_global_dense", "query_dense"),
        ("key_global_dense", "key_dense"),
        ("value_global_dense", "value_dense"),
    )
    blocks = zip(_at(short, "transformer_layers"), _at(long, "transformer_layers"))
    for short_block, long_block in blocks:
        for global_, local in pairs:
            copied = _at(long_block, f"attention_layer.{global_}").kernel
            original = _at(short_block, f"attention_layer.{local}").kernel
            np.testing.assert_array_equal(
                keras.ops.convert_to_numpy(copied),
                keras.ops.convert_to_numpy(original),
                err_msg=f"{copied.path} is not a copy of {original.path}",
            )


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_every_sublayer_with_weights_is_named_after_its_attribute(model_type):
    backbone = build(model_type)
    wrong = []
    for owner in [backbone, *backbone._flatten_layers(include_self=False)]:
        for attribute, sublayer in vars(owner).items():
            named = isinstance(sublayer, keras.layers.Layer) and not attribute.startswith("_")
            if named and sublayer.weights and sublayer.name != attribute:
                wrong.append(f"{owner.name}.{attribute} is named {sublayer.name!r}")
    assert not wrong, f"{model_type}: " + "; ".join(wrong)
