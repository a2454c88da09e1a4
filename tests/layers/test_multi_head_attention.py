import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    attention_weights,
    np_attention_mask,
    np_multi_head_attention,
    padding_mask,
    random_floats,
    run_standard_check,
    to_float32_numpy,
    to_numpy,
    xla_call,
)

from kbert.layers import MultiHeadAttention

BATCH, LENGTH, HIDDEN, HEADS, KEY_DIM = 2, 8, 16, 2, 8
LENGTHS = [LENGTH, 5]


def causal_and_padding(lengths, length):
    causal = np.tril(np.ones((length, length), "int32"))
    return causal[None] * padding_mask(lengths, length)[:, None, :]


def padding_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        # dropout > 0: the fit step takes the explicit-score (training) path.
        make_layer=lambda: MultiHeadAttention(HEADS, KEY_DIM, dropout=0.1),
        inputs={
            "query": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "padding_mask": padding_mask(LENGTHS, LENGTH),
        },
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def attention_mask_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: MultiHeadAttention(HEADS, KEY_DIM),
        inputs={
            "query": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "attention_mask": causal_and_padding(LENGTHS, LENGTH),
        },
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def cross_attention_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: MultiHeadAttention(HEADS, 4, value_dim=6, output_dim=10),
        inputs={
            "query": random_floats(rng, (BATCH, LENGTH, HIDDEN)),
            "value": random_floats(rng, (BATCH, 6, 12)),
            "padding_mask": padding_mask([6, 3], 6),
        },
        expected_shape=(BATCH, LENGTH, 10),
    )


CASES = {
    "padding_mask": padding_case,
    "attention_mask": attention_mask_case,
    "cross_attention": cross_attention_case,
}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def reference(layer, query, value=None, padding=None, attention=None):
    value = query if value is None else value
    mask = np_attention_mask(query.shape[0], query.shape[1], value.shape[1], padding, attention)
    return np_multi_head_attention(
        query.astype(np.float64),
        value.astype(np.float64),
        attention_weights(layer),
        layer.num_heads,
        layer.key_dim,
        layer.value_dim,
        mask=mask,
        scale=layer.scale,
    )


@pytest.mark.parametrize("masks", ["none", "padding", "attention", "both"])
def test_self_attention_matches_numpy(masks):
    rng = np.random.default_rng(1)
    layer = MultiHeadAttention(HEADS, KEY_DIM, bias_initializer="random_normal")
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    padding = padding_mask(LENGTHS, LENGTH) if masks in ("padding", "both") else None
    attention = None
    if masks in ("attention", "both"):
        # A random (batch, q, k) mask that keeps the diagonal, so no row is empty.
        attention = (rng.random((BATCH, LENGTH, LENGTH)) < 0.5).astype("int32")
        attention |= np.eye(LENGTH, dtype="int32")[None]
    outputs = to_numpy(layer(x, padding_mask=padding, attention_mask=attention))
    np.testing.assert_allclose(outputs, reference(layer, x, None, padding, attention), atol=1e-5, rtol=0)


def test_cross_attention_with_options_matches_numpy():
    rng = np.random.default_rng(2)
    layer = MultiHeadAttention(3, 4, value_dim=5, output_dim=7, scale=0.3, use_bias=False)
    query = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    value = random_floats(rng, (BATCH, 5, 12))
    padding = padding_mask([5, 2], 5)
    attention = np.ones((BATCH, LENGTH, 5), "int32")
    attention[1, :, 0] = 0
    outputs = to_numpy(layer(query, value=value, padding_mask=padding, attention_mask=attention))
    assert outputs.shape == (BATCH, LENGTH, 7)
    assert layer.query_dense.bias is None
    np.testing.assert_allclose(
        outputs, reference(layer, query, value, padding, attention), atol=1e-5, rtol=0
    )


def test_separate_key_input():
    rng = np.random.default_rng(3)
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    query = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    key = random_floats(rng, (BATCH, 6, HIDDEN))
    value = random_floats(rng, (BATCH, 6, HIDDEN))
    outputs = to_numpy(layer(query, value=value, key=key))
    w = attention_weights(layer)
    q = (query @ w["query"][0] + w["query"][1]).reshape(BATCH, LENGTH, HEADS, KEY_DIM)
    k = (key @ w["key"][0] + w["key"][1]).reshape(BATCH, 6, HEADS, KEY_DIM)
    v = (value @ w["value"][0] + w["value"][1]).reshape(BATCH, 6, HEADS, KEY_DIM)
    scores = np.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(KEY_DIM)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    context = np.einsum("bnqk,bknh->bqnh", probabilities, v).reshape(BATCH, LENGTH, HIDDEN)
    expected = context @ w["output"][0] + w["output"][1]
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def explicit_path_layer(dropout=0.3):
    """A layer whose training call takes the explicit-score (dropout) path with nothing dropped.

    The path is chosen by the layer's `dropout` argument; setting the rate of
    its internal probability-dropout layer to 0 isolates the score computation.
    """
    layer = MultiHeadAttention(HEADS, KEY_DIM, dropout=dropout, bias_initializer="random_normal")
    layer.dropout_layer.rate = 0.0
    return layer


@pytest.mark.parametrize("masks", ["padding", "attention"])
def test_explicit_training_path_equals_fused_inference_path(masks):
    rng = np.random.default_rng(4)
    layer = explicit_path_layer()
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    kwargs = (
        {"padding_mask": padding_mask(LENGTHS, LENGTH)}
        if masks == "padding"
        else {"attention_mask": causal_and_padding(LENGTHS, LENGTH)}
    )
    fused = to_numpy(layer(x, training=False, **kwargs))
    explicit = to_numpy(layer(x, training=True, **kwargs))
    np.testing.assert_allclose(explicit, fused, atol=1e-5, rtol=0)
    expected = reference(layer, x, None, kwargs.get("padding_mask"), kwargs.get("attention_mask"))
    np.testing.assert_allclose(explicit, expected, atol=1e-5, rtol=0)


def test_dropout_zero_training_equals_inference():
    rng = np.random.default_rng(5)
    layer = MultiHeadAttention(HEADS, KEY_DIM, dropout=0.0)
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    mask = padding_mask(LENGTHS, LENGTH)
    np.testing.assert_allclose(
        to_numpy(layer(x, padding_mask=mask, training=True)),
        to_numpy(layer(x, padding_mask=mask, training=False)),
        atol=1e-6,
        rtol=0,
    )


def test_attention_dropout_active_only_in_training():
    rng = np.random.default_rng(6)
    layer = MultiHeadAttention(HEADS, KEY_DIM, dropout=0.5)
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    mask = padding_mask(LENGTHS, LENGTH)
    inference = to_numpy(layer(x, padding_mask=mask))
    np.testing.assert_allclose(to_numpy(layer(x, padding_mask=mask, training=False)), inference, atol=0)
    np.testing.assert_allclose(inference, reference(layer, x, None, mask), atol=1e-5, rtol=0)
    trained = to_numpy(layer(x, padding_mask=mask, training=True))
    assert np.all(np.isfinite(trained))
    assert np.abs(trained - inference).max() > 1e-3


def test_attention_dropout_drops_each_probability_with_its_rate_and_rescales_the_rest():
    # Zero queries give uniform probabilities 1/LENGTH; one-hot values and
    # identity projections make the output the dropped probabilities
    # themselves: 0 with probability `rate`, else 1 / (LENGTH * (1 - rate)).
    # (PyTorch's fused kernel applies this dropout; TF and JAX, the explicit path.)
    batch, length, rate = 64, 16, 0.25
    layer = MultiHeadAttention(1, length, dropout=rate, use_bias=False)
    layer.build((batch, length, length))
    identity = np.eye(length, dtype="float32")
    layer.set_weights([np.zeros_like(identity), identity, identity, identity])
    x = np.broadcast_to(identity, (batch, length, length))
    dropped = to_numpy(layer(x, training=True))
    kept = dropped[dropped != 0]
    np.testing.assert_allclose(kept, 1 / (length * (1 - rate)), rtol=1e-5)
    assert abs(1 - kept.size / dropped.size - rate) < 0.02  # 16,384 draws: 6 standard deviations
    # Independent masks per row: about 860 of the 1,024 rows differ (one mask shared by all: 1).
    assert len({row.tobytes() for row in dropped.reshape(-1, length)}) > 0.7 * batch * length


@pytest.mark.parametrize("path", ["fused", "explicit"])
@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_padded_keys_never_influence_real_positions(path, policy):
    keras.config.set_dtype_policy(policy)
    rng = np.random.default_rng(7)
    layer = explicit_path_layer() if path == "explicit" else MultiHeadAttention(HEADS, KEY_DIM)
    mask = padding_mask(LENGTHS, LENGTH)
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    changed = x.copy()
    changed[1, 5:] = random_floats(rng, (LENGTH - 5, HIDDEN), scale=100.0)
    training = path == "explicit"
    before = to_float32_numpy(layer(x, padding_mask=mask, training=training))
    after = to_float32_numpy(layer(changed, padding_mask=mask, training=training))
    np.testing.assert_allclose(after[1, :5], before[1, :5], atol=1e-6, rtol=0)
    np.testing.assert_allclose(after[0], before[0], atol=1e-6, rtol=0)
    assert np.all(np.isfinite(after))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_xla_compiled_call_under_mixed_precision_matches_eager(policy):
    # JAX on CPU cannot compile its fused kernel in float16; the layer must still compile.
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(3)
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    x = random_floats(np.random.default_rng(3), (BATCH, LENGTH, HIDDEN))
    mask = padding_mask(LENGTHS, LENGTH)
    eager = to_float32_numpy(layer(x, padding_mask=mask))
    compiled = xla_call(layer, x, padding_mask=mask)
    assert str(compiled.dtype) == layer.compute_dtype
    # XLA fuses and rounds in another order: a few steps of bfloat16's 8-bit significand (0.4%) apart.
    np.testing.assert_allclose(compiled.astype("float32"), eager, atol=2e-2, rtol=2e-2)


def test_masked_keys_get_no_weight_in_cross_attention():
    rng = np.random.default_rng(8)
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    query = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    value = random_floats(rng, (BATCH, 6, HIDDEN))
    mask = padding_mask([6, 2], 6)
    before = to_numpy(layer(query, value=value, padding_mask=mask))
    value[1, 2:] = 50.0
    after = to_numpy(layer(query, value=value, padding_mask=mask))
    np.testing.assert_allclose(after, before, atol=1e-6, rtol=0)


def test_default_scale_is_inverse_sqrt_key_dim():
    assert MultiHeadAttention(HEADS, KEY_DIM).score_scale == pytest.approx(KEY_DIM**-0.5)
    assert MultiHeadAttention(HEADS, KEY_DIM, scale=1.0).score_scale == 1.0


def test_projections_get_independent_initial_weights():
    layer = MultiHeadAttention(HEADS, KEY_DIM, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02))
    layer.build((BATCH, LENGTH, HIDDEN))
    q, k = to_numpy(layer.query_dense.kernel), to_numpy(layer.key_dense.kernel)
    assert not np.allclose(q, k)


def test_query_of_wrong_rank_raises():
    with pytest.raises(
        ValueError,
        match=r"MultiHeadAttention expects query of shape \(batch, sequence, width\); received shape \(2, 16\)",
    ):
        MultiHeadAttention(HEADS, KEY_DIM)(np.zeros((BATCH, HIDDEN), "float32"))


def test_padding_mask_of_wrong_rank_raises():
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    x = np.zeros((BATCH, LENGTH, HIDDEN), "float32")
    with pytest.raises(
        ValueError, match=r"padding_mask must have shape \(batch, sequence\); received shape \(2, 8, 8\)"
    ):
        layer(x, padding_mask=np.ones((BATCH, LENGTH, LENGTH), "int32"))


def test_attention_mask_of_wrong_rank_raises():
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    x = np.zeros((BATCH, LENGTH, HIDDEN), "float32")
    with pytest.raises(
        ValueError, match=r"attention_mask must have shape \(batch, query, key\); received shape \(2, 8\)"
    ):
        layer(x, attention_mask=np.ones((BATCH, LENGTH), "int32"))


@pytest.mark.parametrize("path", ["fused", "explicit"])
@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_all_padding_sequence_stays_finite(path, policy):
    # A batch-filler row with no real key must not produce NaN (a masked loss
    # would multiply it by 0 and still be NaN); its real neighbour is unaffected.
    keras.config.set_dtype_policy(policy)
    rng = np.random.default_rng(9)
    layer = explicit_path_layer() if path == "explicit" else MultiHeadAttention(HEADS, KEY_DIM)
    x = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    mask = padding_mask([LENGTH, 0], LENGTH)
    training = path == "explicit"
    outputs = to_float32_numpy(layer(x, padding_mask=mask, training=training))
    assert np.all(np.isfinite(outputs))
    alone = to_float32_numpy(layer(x[:1], padding_mask=mask[:1], training=training))
    np.testing.assert_allclose(outputs[:1], alone, atol=1e-6, rtol=0)
