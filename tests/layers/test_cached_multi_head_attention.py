import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    attention_weights,
    np_softmax,
    padding_mask,
    random_floats,
    run_standard_check,
    to_numpy,
    xla_call,
)

from kbert.backend import fast_paths
from kbert.layers import CachedMultiHeadAttention

BATCH, LENGTH, HIDDEN, HEADS, KEY_DIM = 2, 6, 12, 3, 4


def np_biased_attention(query, value, weights, bias=None, mask=None, scale=1.0):
    """Multi-head attention with an additive score bias; masked keys get zero weight."""
    batch, q_len, _ = query.shape
    k_len = value.shape[1]

    def heads(x, name, length):
        return (x.astype(np.float64) @ weights[name][0]).reshape(batch, length, HEADS, KEY_DIM)

    q, k, v = heads(query, "query", q_len), heads(value, "key", k_len), heads(value, "value", k_len)
    scores = np.einsum("bqnh,bknh->bnqk", q, k) * scale
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = np.where(mask[:, None], scores, -np.inf)
    context = np.einsum("bnqk,bknh->bqnh", np_softmax(scores), v).reshape(batch, q_len, -1)
    return context @ weights["output"][0]


def make_layer():
    return CachedMultiHeadAttention(HEADS, KEY_DIM, use_bias=False, scale=1.0)


def bias_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=make_layer,
        inputs={
            "query": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "padding_mask": padding_mask([LENGTH, 4], LENGTH),
            "attention_bias": random_floats(rng, (BATCH, HEADS, LENGTH, LENGTH)),
        },
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, bias_case(), tmp_path)


@pytest.mark.fast_paths_both_ways
def test_bias_matches_numpy():
    rng = np.random.default_rng(1)
    layer = make_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    bias = random_floats(rng, (1, HEADS, LENGTH, LENGTH), scale=2.0)
    padding = padding_mask([LENGTH, 3], LENGTH)
    outputs = to_numpy(layer(x, padding_mask=padding, attention_bias=bias))
    mask = np.broadcast_to(padding[:, None, :].astype(bool), (BATCH, LENGTH, LENGTH))
    expected = np_biased_attention(x, x, attention_weights(layer), bias=bias, mask=mask)
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_query_kernel_initializer_only_for_query():
    layer = CachedMultiHeadAttention(
        2, 64, use_bias=False, kernel_initializer="zeros", query_kernel_initializer="ones"
    )
    layer.build((None, None, 16))
    assert np.all(to_numpy(layer.query_dense.kernel) == 1)
    assert np.all(to_numpy(layer.key_dense.kernel) == 0)


@pytest.mark.fast_paths_both_ways
def test_incremental_cache_equals_causal_attention():
    rng = np.random.default_rng(2)
    layer = make_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    bias = random_floats(rng, (1, HEADS, LENGTH, LENGTH))
    causal = np.tril(np.ones((LENGTH, LENGTH), "int32"))[None]
    expected = to_numpy(layer(x, attention_mask=causal, attention_bias=bias))
    cache = np.zeros((BATCH, HEADS, 2, LENGTH, KEY_DIM), "float32")
    for i in range(LENGTH):
        step, cache = layer(
            x[:, i : i + 1],
            attention_mask=causal[:, i : i + 1],
            attention_bias=bias[:, :, i : i + 1],
            cache=cache,
            cache_update_index=i,
        )
        np.testing.assert_allclose(to_numpy(step)[:, 0], expected[:, i], atol=1e-5, rtol=0)
    # The filled cache holds every position's projected keys and values.
    np.testing.assert_allclose(to_numpy(cache), to_numpy(layer.compute_cache(x)), atol=1e-6)


@pytest.mark.fast_paths_both_ways
def test_in_place_writes_give_the_same_steps():
    rng = np.random.default_rng(5)
    layer = make_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    causal = np.tril(np.ones((LENGTH, LENGTH), "int32"))[None]
    copied = np.zeros((BATCH, HEADS, 2, LENGTH, KEY_DIM), "float32")
    written = keras.ops.zeros(copied.shape)
    for i in range(LENGTH):
        step = {"attention_mask": causal[:, i : i + 1], "cache_update_index": i}
        expected, copied = layer(x[:, i : i + 1], cache=copied, **step)
        with fast_paths.in_place_cache_writes():
            outputs, updated = layer(x[:, i : i + 1], cache=written, **step)
        np.testing.assert_allclose(to_numpy(outputs), to_numpy(expected), atol=1e-6)
        # PyTorch's fast path writes into the given tensor; elsewhere the update stays functional.
        assert (updated is written) == fast_paths.active()
        written = updated
    np.testing.assert_allclose(to_numpy(written), to_numpy(copied), atol=1e-6)


def test_cache_update_under_xla():
    rng = np.random.default_rng(3)
    layer = make_layer()
    x = random_floats(rng, (BATCH, 1, HIDDEN))
    cache = random_floats(rng, (BATCH, HEADS, 2, LENGTH, KEY_DIM))
    index = keras.ops.convert_to_tensor(2, "int32")
    eager_out, eager_cache = layer(x, cache=cache, cache_update_index=2)
    out, new_cache = xla_call(layer, x, cache=cache, cache_update_index=index)
    np.testing.assert_allclose(out, to_numpy(eager_out), atol=1e-5)
    np.testing.assert_allclose(new_cache, to_numpy(eager_cache), atol=1e-6)
    np.testing.assert_array_equal(new_cache[:, :, :, 3:], cache[:, :, :, 3:])


def test_cross_attention_cache_is_used_as_is():
    rng = np.random.default_rng(4)
    layer = make_layer()
    x, memory = random_floats(rng, (BATCH, 2, HIDDEN)), random_floats(rng, (BATCH, 5, HIDDEN))
    expected = to_numpy(layer(x, value=memory))
    outputs, cache = layer(x, cache=layer.compute_cache(memory))
    np.testing.assert_allclose(to_numpy(outputs), expected, atol=1e-5)


def test_errors():
    layer = CachedMultiHeadAttention(2, 4, value_dim=3)
    with pytest.raises(ValueError, match="value_dim == key_dim"):
        layer(np.ones((1, 1, 8), "float32"), cache=np.zeros((1, 2, 2, 3, 4), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="cache must have shape"):
        make_layer()(np.ones((1, 1, 12), "float32"), cache=np.zeros((1, 2, 3), "float32"))
