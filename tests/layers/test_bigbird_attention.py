"""BigBirdAttention: equals dense attention restricted to the ITC block pattern.

The reference pattern and attention are written here in NumPy from
docs/algorithms.md §12 (global blocks 0 and nb-1, window {i-1, i, i+1}, the random
blocks of the layer's plan), not from kbert code.
"""

import keras
import numpy as np
import pytest
from helpers import (
    BACKEND,
    STANDARD_CHECKS,
    LayerCase,
    attention_weights,
    input_gradient,
    np_itc_pattern,
    np_dense,
    np_softmax,
    padding_mask,
    random_floats,
    run_standard_check,
    to_float32_numpy,
    to_numpy,
    xla_call,
)
from keras import ops

from kbert.layers import BigBirdAttention, sparse_attention

BATCH, HIDDEN, HEADS, KEY_DIM = 2, 8, 2, 4
BLOCK, RANDOM = 2, 1  # full attention up to (5 + 2·1)·2 = 14 tokens
LENGTH = 19  # 10 blocks after padding to 20
# Groups of 3 middle query blocks: the 8 middle blocks run in a loop of 3
# groups (ops.map), the last one padded with a row that is dropped.
GROUPED = 3 * BLOCK


def make_layer(**kwargs):
    return BigBirdAttention(
        HEADS,
        KEY_DIM,
        block_size=BLOCK,
        num_random_blocks=RANDOM,
        bias_initializer="random_normal",
        **kwargs,
    )


def sparse_case():
    # No attention dropout: on JAX its random bits triple the compile time of
    # the fit step (the inherited dense kernel applies the dropout layer).
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=make_layer,
        inputs={
            "query": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "padding_mask": padding_mask([LENGTH, 12], LENGTH),
        },
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, sparse_case(), tmp_path)


def np_masked_attention(layer, x, head_masks, with_probabilities=False):
    """Dense multi-head attention with a per-head bool mask `(batch, heads, n, n)`
    (and its probabilities)."""
    weights = attention_weights(layer)
    batch, n, _ = x.shape
    x = x.astype(np.float64)

    def heads(name):
        return np_dense(x, *weights[name]).reshape(batch, n, HEADS, KEY_DIM)

    scores = np.einsum("bqnh,bknh->bnqk", heads("query"), heads("key")) / np.sqrt(KEY_DIM)
    probabilities = np_softmax(np.where(head_masks, scores, -np.inf))
    context = np.einsum("bnqk,bknh->bqnh", probabilities, heads("value"))
    outputs = np_dense(context.reshape(batch, n, HEADS * KEY_DIM), *weights["output"])
    return (outputs, probabilities) if with_probabilities else outputs


def reference(layer, x, padding, with_probabilities=False):
    n = x.shape[1]
    if n <= (5 + 2 * RANDOM) * BLOCK:
        pattern = np.ones((HEADS, n, n), bool)
    else:
        pattern = np_itc_pattern(layer.random_plan(n), n, BLOCK)
    keys = np.ones(x.shape[:2], bool) if padding is None else padding.astype(bool)
    return np_masked_attention(layer, x, pattern[None] & keys[:, None, None, :], with_probabilities)


@pytest.mark.parametrize("length, lengths", [(LENGTH, [LENGTH, 12]), (14, [14, 9])])
def test_probabilities_are_the_dense_map_of_the_block_pattern(length, lengths):
    """Asked for, the probabilities come as a dense map equal to the NumPy reference of the
    pattern (0 outside it), and the outputs stay those of the sparse kernel."""
    rng = np.random.default_rng(length)
    layer = make_layer()
    x = random_floats(rng, (BATCH, length, HIDDEN))
    padding = padding_mask(lengths, length)
    outputs, probabilities = to_numpy(layer(x, padding_mask=padding, return_probabilities=True))
    expected_outputs, expected_probabilities = reference(layer, x, padding, with_probabilities=True)
    np.testing.assert_allclose(probabilities, expected_probabilities, atol=1e-6, rtol=0)
    np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs, to_numpy(layer(x, padding_mask=padding)), atol=1e-5, rtol=0)
    if length > layer.full_attention_length:
        assert np.all(probabilities[:, ~layer.attention_pattern(length)] == 0)


def test_probabilities_of_long_sequences_are_refused(monkeypatch):
    monkeypatch.setattr(sparse_attention, "DENSE_PROBABILITIES_MAX_LENGTH", 16)
    layer = make_layer()
    with pytest.raises(ValueError, match="dense map for sequences of at most 16 tokens; received 19"):
        layer(np.ones((1, LENGTH, HIDDEN), "float32"), return_probabilities=True)


@pytest.mark.parametrize(
    "length, lengths",
    [
        (20, None),  # a multiple of the block size, no padding mask
        (LENGTH, [LENGTH, 12]),  # padded inside the layer; padding keys masked
        (14, [14, 9]),  # (5 + 2r)·b tokens: full attention, as the reference
    ],
)
@pytest.mark.parametrize("group_queries", [1024, GROUPED])
def test_equals_dense_attention_with_the_block_pattern(length, lengths, group_queries, monkeypatch):
    monkeypatch.setattr(sparse_attention, "GROUP_QUERIES", group_queries)
    rng = np.random.default_rng(length)
    layer = make_layer()
    x = random_floats(rng, (BATCH, length, HIDDEN))
    padding = None if lengths is None else padding_mask(lengths, length)
    outputs = to_numpy(layer(x, padding_mask=padding))
    np.testing.assert_allclose(outputs, reference(layer, x, padding), atol=1e-5, rtol=0)
    # The random plan is a constant: training (no dropout here) changes nothing.
    np.testing.assert_allclose(
        to_numpy(layer(x, padding_mask=padding, training=True)), outputs, atol=1e-6, rtol=0
    )
    if group_queries == GROUPED and BACKEND != "torch":
        compiled = xla_call(layer, x, padding_mask=padding)
        np.testing.assert_allclose(compiled, outputs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("group_queries", [1024, GROUPED])
def test_gradients_equal_dense_attention_with_the_block_pattern(group_queries, monkeypatch):
    monkeypatch.setattr(sparse_attention, "GROUP_QUERIES", group_queries)
    rng = np.random.default_rng(1)
    layer = make_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    padding = padding_mask([LENGTH, 12], LENGTH)
    layer(x, padding_mask=padding)
    weights = {k: [ops.convert_to_tensor(w) for w in v] for k, v in attention_weights(layer).items()}
    mask = np_itc_pattern(layer.random_plan(LENGTH), LENGTH, BLOCK)[None]
    mask = ops.convert_to_tensor(mask & padding.astype(bool)[:, None, None, :])
    probe = ops.convert_to_tensor(random_floats(rng, (BATCH, LENGTH, HIDDEN)))

    def dense(x):  # dense masked attention in keras.ops, independent of kbert
        def heads(name):
            kernel, bias = weights[name]
            return ops.reshape(ops.matmul(x, kernel) + bias, (BATCH, LENGTH, HEADS, KEY_DIM))

        scores = ops.einsum("bqnh,bknh->bnqk", heads("query"), heads("key")) / np.sqrt(KEY_DIM)
        probabilities = ops.softmax(ops.where(mask, scores, -1e9), axis=-1)
        context = ops.einsum("bnqk,bknh->bqnh", probabilities, heads("value"))
        context = ops.reshape(context, (BATCH, LENGTH, HEADS * KEY_DIM))
        return (ops.matmul(context, weights["output"][0]) + weights["output"][1]) * probe

    expected = input_gradient(dense, x)
    actual = input_gradient(lambda x: layer(x, padding_mask=padding) * probe, x)
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


def test_attention_pattern_is_the_itc_pattern():
    layer = make_layer()
    pattern = layer.attention_pattern(LENGTH)
    assert pattern.shape == (HEADS, LENGTH, LENGTH) and pattern.dtype == bool
    np.testing.assert_array_equal(pattern, np_itc_pattern(layer.random_plan(LENGTH), LENGTH, BLOCK))
    # Each middle query attends to (5 + r) blocks; global rows and columns are full.
    assert layer.attention_pattern(20)[0, 2 * BLOCK].sum() == (5 + RANDOM) * BLOCK
    assert pattern[:, :BLOCK].all() and pattern[:, :, :BLOCK].all()
    assert layer.attention_pattern(14).all()


@pytest.mark.parametrize("length, r", [(64 * 20, 3), (40, 2), (24, 0)])
def test_random_plan_avoids_window_and_globals(length, r):
    layer = BigBirdAttention(3, 4, block_size=length // 20 if length > 40 else 2, num_random_blocks=r)
    plan = layer.random_plan(length)
    num_blocks = -(-length // layer.block_size)
    assert plan.shape == (3, num_blocks - 2, r)
    for head in range(3):
        for i in range(1, num_blocks - 1):
            row = plan[head, i - 1].tolist()
            assert len(set(row)) == r
            assert not set(row) & {0, num_blocks - 1, i - 1, i, i + 1}
            assert all(0 < j < num_blocks - 1 for j in row)


def test_random_plan_is_fixed_by_the_seed():
    first, again = make_layer(seed=3), make_layer(seed=3)
    np.testing.assert_array_equal(first.random_plan(40), again.random_plan(40))
    assert not np.array_equal(first.random_plan(40), make_layer(seed=4).random_plan(40))
    # The per-head plans differ, and the plan is a copy the caller cannot edit.
    plan = first.random_plan(40)
    assert not np.array_equal(plan[0], plan[1])
    plan[:] = 0
    assert first.random_plan(40).any()


def test_padding_never_influences_real_positions_in_float16():
    # float16 is where a masking constant would overflow; the exactness tests cover float32.
    keras.config.set_dtype_policy("mixed_float16")
    rng = np.random.default_rng(3)
    layer = make_layer()
    mask = padding_mask([LENGTH, 15], LENGTH)
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    changed = x.copy()
    changed[1, 15:] = random_floats(rng, (LENGTH - 15, HIDDEN), scale=100.0)
    before = to_float32_numpy(layer(x, padding_mask=mask))
    after = to_float32_numpy(layer(changed, padding_mask=mask))
    assert np.all(np.isfinite(after))
    np.testing.assert_allclose(after[1, :15], before[1, :15], atol=1e-6, rtol=0)
    np.testing.assert_allclose(after[0], before[0], atol=1e-6, rtol=0)


def test_bad_arguments_and_inputs_raise():
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        BigBirdAttention(HEADS, KEY_DIM, block_size=0)
    with pytest.raises(ValueError, match="num_random_blocks must be a non-negative integer"):
        BigBirdAttention(HEADS, KEY_DIM, num_random_blocks=-1)
    layer = make_layer()
    x = np.zeros((BATCH, LENGTH, HIDDEN), "float32")
    with pytest.raises(ValueError, match="padding_mask.*only"):
        layer(x, attention_mask=np.ones((BATCH, LENGTH, LENGTH), "int32"))
    with pytest.raises(ValueError, match="self-attention only"):
        layer(x, value=x)
    with pytest.raises(ValueError, match="too few to draw 3 random blocks"):
        BigBirdAttention(HEADS, KEY_DIM, block_size=2, num_random_blocks=3).random_plan(14)
