"""`attention_implementation`: the "auto", "fused" and "explicit" kernels give the same outputs on every
family that takes the argument (the encoders, GPT-2, T5, BART), are kept in the config, and "fused"
refuses a call its kernel cannot take."""

import keras
import numpy as np
import pytest
from backbone_harness import causal_harness_inputs, seq2seq_harness_inputs
from helpers import to_numpy

import kbert
from kbert.layers.multi_head_attention import MultiHeadAttention

TINY = dict(vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_positions=16)
FAMILIES = {
    "bert_base": {},
    "roberta_base": {},
    "albert_base": {"embedding_dim": 4},
    "electra_small": {"embedding_dim": 4},
    "distilbert_base": {},
    "bigbird_base": {"attention_kwargs": {"block_size": 2, "num_random_blocks": 1}},  # sparse from 15 tokens
    "longformer_base": {"attention_kwargs": {"window": 3}},
}


def _inputs(length=8):
    rng = np.random.default_rng(0)
    padding_mask = np.ones((2, length), "int32")
    padding_mask[1, -3:] = 0
    return {
        "token_ids": rng.integers(1, TINY["vocabulary_size"], (2, length)).astype("int32"),
        "segment_ids": np.zeros((2, length), "int32"),
        "padding_mask": padding_mask,
    }


SIZES = {name: TINY[name] for name in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")}
# family -> (the model with "auto", its inputs, the output compared); padded rows in every input
DECODING = {
    "gpt2": (lambda: kbert.models.GPT2(**SIZES, max_positions=16, end_id=0), causal_harness_inputs(2, 8), "logits"),
    "t5": (lambda: kbert.models.T5(**SIZES), seq2seq_harness_inputs(2, 8), "logits"),
    "bart": (lambda: kbert.models.BART(**SIZES, max_positions=16), seq2seq_harness_inputs(2, 8), "logits"),
}


def _encoder_case(family):
    length = 16 if family == "bigbird_base" else 8
    return kbert.models.build(family, **TINY, **FAMILIES[family]), _inputs(length), "sequence_output"


@pytest.mark.parametrize("family", [*FAMILIES, *DECODING])
def test_the_three_kernels_agree(family):
    if family in DECODING:
        make, inputs, output = DECODING[family]
        auto = make()
    else:
        auto, inputs, output = _encoder_case(family)
    expected = to_numpy(auto(inputs, training=False)[output])
    for implementation in ("fused", "explicit"):
        config = auto.get_config()
        assert config["attention_implementation"] == "auto"
        config["attention_implementation"] = implementation
        other = type(auto).from_config(config)
        other.set_weights(auto.get_weights())
        np.testing.assert_allclose(to_numpy(other(inputs, training=False)[output]), expected, atol=1e-5,
                                   err_msg=f"{family}: {implementation} differs from auto")


def test_the_choice_is_kept_and_old_configs_load_as_auto():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, attention_implementation="explicit")
    config = layer.get_config()
    assert MultiHeadAttention.from_config(config).attention_implementation == "explicit"
    del config["attention_implementation"]  # a layer saved before the argument existed
    assert MultiHeadAttention.from_config(config).attention_implementation == "auto"


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="attention_implementation must be one of"):
        MultiHeadAttention(num_heads=2, key_dim=4, attention_implementation="flash")


def test_fused_refuses_a_call_its_kernel_cannot_take():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=2, attention_implementation="fused")
    with pytest.raises(ValueError, match="attention_implementation='fused' cannot take this call"):
        layer(keras.ops.ones((1, 3, 8)))
    explicit = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=2, attention_implementation="explicit")
    assert tuple(explicit(keras.ops.ones((1, 3, 8))).shape) == (1, 3, 8)
