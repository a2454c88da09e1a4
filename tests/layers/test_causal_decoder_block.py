"""CausalDecoderBlock (GPT-2's block) against a NumPy reference, whole sequences and cached steps."""

import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    np_attention_mask,
    np_gelu_tanh,
    padding_mask,
    random_floats,
    run_standard_check,
    to_numpy,
)
from keras import ops
from test_encoder_block import np_encoder_block

from kbert.layers import CachedMultiHeadAttention, CausalDecoderBlock

BATCH, LENGTH, HIDDEN, HEADS, INTERMEDIATE = 2, 6, 16, 2, 32
LENGTHS = [LENGTH, 4]


def make_block(**options):
    return CausalDecoderBlock(HEADS, INTERMEDIATE, activation="gelu_approximate", dropout=0.0,
                              **options)


def make_inputs():
    rng = np.random.default_rng(0)
    return {
        "inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
        "padding_mask": padding_mask(LENGTHS, LENGTH),
    }


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    case = LayerCase(make_layer=make_block, inputs=make_inputs(),
                     expected_shape=(BATCH, LENGTH, HIDDEN))
    run_standard_check(check, case, tmp_path)


@pytest.mark.parametrize("normalize_first", [True, False])
def test_matches_numpy_reference_under_a_causal_mask(normalize_first):
    block = make_block(normalize_first=normalize_first)
    inputs = make_inputs()
    outputs = to_numpy(block(inputs["inputs"], padding_mask=inputs["padding_mask"]))
    assert isinstance(block.attention_layer, CachedMultiHeadAttention)
    causal = np.tril(np.ones((BATCH, LENGTH, LENGTH), "int32"))
    mask = np_attention_mask(BATCH, LENGTH, LENGTH, inputs["padding_mask"], causal)
    expected = np_encoder_block(block, inputs["inputs"], mask, activation=np_gelu_tanh)
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_cached_steps_equal_the_whole_sequence():
    block = make_block()
    x = make_inputs()["inputs"]
    whole = to_numpy(block(x))
    cache = ops.zeros((BATCH, HEADS, 2, LENGTH, HIDDEN // HEADS))
    steps = []
    for index in range(LENGTH):
        step, cache = block(x[:, index:index + 1], cache=cache, cache_update_index=index)
        steps.append(to_numpy(step))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), whole, atol=1e-5, rtol=0)


def test_cache_without_index_raises():
    block = make_block()
    with pytest.raises(ValueError, match="Pass cache and cache_update_index together"):
        block(make_inputs()["inputs"], cache=ops.zeros((BATCH, HEADS, 2, LENGTH, HIDDEN // HEADS)))
