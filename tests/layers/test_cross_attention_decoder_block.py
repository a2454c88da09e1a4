import contextlib

import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    np_t5_block,
    padding_mask,
    random_floats,
    run_standard_check,
    to_numpy,
)

from kbert.backend import fast_paths
from kbert.layers import CrossAttentionDecoderBlock

BATCH, LENGTH, SOURCE, WIDTH, HEADS, FF = 2, 5, 7, 12, 3, 10


# BART's block (docs/algorithms.md §10): post-LayerNorm, biases, scaled scores, exact GELU.
BART_STYLE = dict(
    normalize_first=False,
    normalization="layer",
    use_bias=True,
    attention_scale=None,
    activation="gelu",
    layer_norm_epsilon=1e-5,
    kernel_initializer=keras.initializers.RandomNormal(stddev=0.3),
)


def decoder_case(gated=False, style=None):
    rng = np.random.default_rng(0)
    style = style or {"activation": "gelu_approximate" if gated else "relu"}
    return LayerCase(
        make_layer=lambda: CrossAttentionDecoderBlock(
            HEADS, FF, dropout=0.1, use_gated_activation=gated, **style
        ),
        inputs={
            "inputs": random_floats(rng, (BATCH, LENGTH, WIDTH)),
            "encoder_outputs": random_floats(rng, (BATCH, SOURCE, WIDTH)),
            "padding_mask": padding_mask([LENGTH, 3], LENGTH),
            "encoder_padding_mask": padding_mask([SOURCE, 4], SOURCE),
            "attention_bias": random_floats(rng, (BATCH, HEADS, LENGTH, LENGTH)),
        },
        expected_shape=(BATCH, LENGTH, WIDTH),
    )


def decoder_only_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: CrossAttentionDecoderBlock(HEADS, FF, use_cross_attention=False),
        inputs={
            "inputs": random_floats(rng, (BATCH, LENGTH, WIDTH)),
            "padding_mask": padding_mask([LENGTH, 3], LENGTH),
        },
        expected_shape=(BATCH, LENGTH, WIDTH),
    )


CASES = {
    "decoder": decoder_case,
    "gated_decoder": lambda: decoder_case(True),
    "decoder_only": decoder_only_case,
    "bart_decoder": lambda: decoder_case(style=BART_STYLE),
}


def randomize_weights(layer, seed=1):
    """Every weight of `layer` (biases and norm offsets included) drawn at random."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, 0.3, weight.shape).astype("float32"))


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, decoder_case(), tmp_path)


# The other configurations run the same code with parts switched off or on: the
# cheap checks here, their numerics in test_matches_numpy.
@pytest.mark.parametrize("check", ["config_round_trip", "symbolic_and_eager"])
@pytest.mark.parametrize("case_name", ["decoder_only", "gated_decoder", "bart_decoder"])
def test_config_and_shapes_of_other_configurations(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_matches_numpy(case_name):
    case = CASES[case_name]()
    layer = case.make_layer()
    case.call(layer, case.inputs)
    randomize_weights(layer)
    outputs = to_numpy(case.call(layer, case.inputs))
    i = case.inputs
    expected = np_t5_block(
        layer, i["inputs"], i.get("encoder_outputs"), i["padding_mask"], i.get("encoder_padding_mask"),
        i.get("attention_bias"), causal=True,
    )
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_causal_future_does_not_leak():
    case = decoder_case()
    layer = case.make_layer()
    inputs = dict(case.inputs)
    before = to_numpy(case.call(layer, inputs))
    inputs["inputs"] = inputs["inputs"].copy()
    inputs["inputs"][:, 3:] += 5.0
    after = to_numpy(case.call(layer, inputs))
    np.testing.assert_allclose(after[:, :3], before[:, :3], atol=1e-6)
    assert np.abs(after[:, 3:] - before[:, 3:]).max() > 1e-3


def test_given_self_attention_mask_replaces_the_causal_one():
    """The causal mask passed in gives the default output; a mask that also hides key 0 changes it."""
    case = decoder_case()
    layer = case.make_layer()
    inputs = dict(case.inputs)
    default = to_numpy(case.call(layer, inputs))
    causal = np.tril(np.ones((LENGTH, LENGTH), bool))[None]
    given = to_numpy(case.call(layer, inputs, self_attention_mask=causal))
    np.testing.assert_allclose(given, default, atol=1e-6, rtol=0)
    hidden = causal.copy()
    hidden[:, 1:, 0] = False
    changed = to_numpy(case.call(layer, inputs, self_attention_mask=hidden))
    np.testing.assert_allclose(changed[:, 0], default[:, 0], atol=1e-6, rtol=0)
    assert np.abs(changed[:, 1:] - default[:, 1:]).max() > 1e-4


@pytest.mark.parametrize("style", ["gated", "bart"])
@pytest.mark.parametrize("in_place", [False, True])
def test_cached_steps_equal_full_call(in_place, style):
    case = decoder_case(gated=True) if style == "gated" else decoder_case(style=BART_STYLE)
    layer = case.make_layer()
    i = case.inputs
    bias = i["attention_bias"]
    full = to_numpy(
        layer(
            i["inputs"], encoder_outputs=i["encoder_outputs"], encoder_padding_mask=i["encoder_padding_mask"],
            attention_bias=bias,
        )
    )
    cache = np.zeros((BATCH, HEADS, 2, LENGTH, WIDTH // HEADS), "float32")
    cross = layer.cross_attention.compute_cache(i["encoder_outputs"])
    for step in range(LENGTH):
        with fast_paths.in_place_cache_writes() if in_place else contextlib.nullcontext():
            out, cache = layer(
                i["inputs"][:, step : step + 1],
                encoder_padding_mask=i["encoder_padding_mask"],
                attention_bias=bias[:, :, step : step + 1],
                self_attention_cache=cache,
                cross_attention_cache=cross,
                cache_update_index=step,
            )
        np.testing.assert_allclose(to_numpy(out)[:, 0], full[:, step], atol=1e-5, rtol=0)


def test_errors():
    layer = CrossAttentionDecoderBlock(HEADS, FF)
    x = np.ones((1, 2, WIDTH), "float32")
    with pytest.raises(ValueError, match="pass encoder_outputs"):
        layer(x)
    with pytest.raises(ValueError, match="together"):
        layer(x, encoder_outputs=x, self_attention_cache=np.zeros((1, HEADS, 2, 2, 4), "float32"))
    with pytest.raises(ValueError, match="not divisible"):
        CrossAttentionDecoderBlock(5, FF).build((1, 2, WIDTH))
    with pytest.raises(ValueError, match="expects inputs of shape"):
        CrossAttentionDecoderBlock(HEADS, FF).build((2, WIDTH))
    with pytest.raises(ValueError, match="normalization must be one of"):
        CrossAttentionDecoderBlock(HEADS, FF, normalization="batch")
    with pytest.raises(ValueError, match="attention_scale"):
        CrossAttentionDecoderBlock(HEADS, FF, attention_scale=0.0)


def test_attention_probabilities_symbolic_and_eager_agree():
    block = CrossAttentionDecoderBlock(num_heads=2, intermediate_dim=8)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    memory = np.ones((2, 7, 8), "float32")
    eager = block(x, encoder_outputs=memory, return_attention_probabilities=True)
    symbolic = block(keras.Input((5, 8)), encoder_outputs=keras.Input((7, 8)),
                     return_attention_probabilities=True)
    assert [tuple(t.shape) for t in eager] == [(2, 5, 8), (2, 2, 5, 5), (2, 2, 5, 7)]
    assert [tuple(t.shape)[1:] for t in symbolic] == [(5, 8), (2, 5, 5), (2, 5, 7)]
    self_probabilities = keras.ops.convert_to_numpy(eager[1])
    np.testing.assert_allclose(self_probabilities.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(self_probabilities[0, 0], k=1) == 0)  # causal: no future key
    with pytest.raises(ValueError, match="not a cache"):
        block(x[:, :1], encoder_outputs=memory, self_attention_cache=np.zeros((2, 2, 2, 5, 4), "float32"),
              cache_update_index=0, return_attention_probabilities=True)
