"""The `head_mask` of every attention layer and block: each head's output scaled by its entry.

References: for dense attention, the NumPy multi-head attention of
tests/helpers.py with each head's context scaled (transformers' `head_mask`
scales the probabilities, the same by linearity). For the sparse layers and
the blocks, the same layer without a head mask but with each head's rows of
the output projection scaled by its factor: the outputs the head mask must
give, by linearity, reached through the weights instead of the context (the
layers without a head mask are checked against NumPy in their own test files).
"""

import contextlib

import numpy as np
import pytest
from helpers import (
    BACKEND,
    attention_weights,
    np_attention_mask,
    np_multi_head_attention,
    padding_mask,
    random_floats,
    to_numpy,
    xla_call,
)

from kbert.layers import (
    BigBirdAttention,
    CachedMultiHeadAttention,
    LongformerAttention,
    MultiHeadAttention,
    T5Block,
    CrossAttentionDecoderBlock,
    EncoderBlock,
)

BATCH, HIDDEN, HEADS, KEY_DIM = 2, 8, 2, 4
# One head off, one doubled in the first sequence; the other way round in the second.
PER_SEQUENCE = np.array([[0.0, 2.0], [1.5, 0.0]], "float32")
# float32 on both sides: round-off only.
TOLERANCE = 1e-5


@contextlib.contextmanager
def output_rows_scaled(attention, factors):
    """`attention`'s output kernel with head h's input rows times `factors[h]`, restored after."""
    kernel = to_numpy(attention.output_dense.kernel)
    rows = np.repeat(np.asarray(factors, "float32"), attention.value_dim)
    attention.output_dense.kernel.assign(kernel * rows[:, None])
    try:
        yield
    finally:
        attention.output_dense.kernel.assign(kernel)


def scaled_reference(call, attentions, head_mask):
    """`call()` with each attention's output rows scaled by the (per-sequence) `head_mask`."""
    head_mask = np.broadcast_to(head_mask, (BATCH, HEADS))
    rows = []
    for row, factors in enumerate(head_mask):
        with contextlib.ExitStack() as stack:
            for attention in attentions:
                stack.enter_context(output_rows_scaled(attention, factors))
            rows.append(to_numpy(call())[row])
    return np.stack(rows)


@pytest.mark.parametrize("head_mask", [np.array([0.0, 1.0], "float32"), PER_SEQUENCE],
                         ids=["per_head", "per_sequence"])
def test_dense_attention_equals_numpy(head_mask):
    rng = np.random.default_rng(0)
    layer = MultiHeadAttention(HEADS, KEY_DIM, bias_initializer="random_normal")
    x = random_floats(rng, (BATCH, 7, HIDDEN))
    padding = padding_mask([7, 4], 7)
    outputs, probabilities = layer(x, padding_mask=padding, head_mask=head_mask,
                                   return_probabilities=True)
    weights = attention_weights(layer)
    factors = np.broadcast_to(head_mask, (BATCH, HEADS))
    context_weights = dict(weights)
    expected = []
    for row in range(BATCH):  # each head's context scaled: its output rows scaled
        kernel, bias = weights["output"]
        context_weights["output"] = (kernel * np.repeat(factors[row], KEY_DIM)[:, None], bias)
        expected.append(np_multi_head_attention(
            x[row:row + 1], x[row:row + 1], context_weights, HEADS, KEY_DIM,
            mask=np_attention_mask(1, 7, 7, padding[row:row + 1]))[0])
    np.testing.assert_allclose(to_numpy(outputs), np.stack(expected), atol=TOLERANCE, rtol=0)
    _, plain = layer(x, padding_mask=padding, return_probabilities=True)
    np.testing.assert_allclose(to_numpy(probabilities),
                               to_numpy(plain) * factors[:, :, None, None], atol=1e-7, rtol=0)
    if BACKEND != "torch":
        compiled = xla_call(layer, x, padding_mask=padding, head_mask=head_mask)
        np.testing.assert_allclose(compiled, to_numpy(outputs), atol=TOLERANCE, rtol=0)


def test_a_head_mask_keeps_the_fused_kernel(monkeypatch):
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    x = random_floats(np.random.default_rng(0), (BATCH, 5, HIDDEN))
    expected = to_numpy(layer(x, head_mask=np.ones(HEADS, "float32")))

    def explicit(*args, **kwargs):
        raise AssertionError("the explicit-score path ran")

    monkeypatch.setattr(layer, "_explicit_attention", explicit)
    np.testing.assert_allclose(to_numpy(layer(x, head_mask=np.ones(HEADS, "float32"))), expected)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-7, rtol=0)


SPARSE_LAYERS = {
    # 19 tokens in blocks of 2: past BigBird's full-attention length (14), block-sparse
    "bigbird": (lambda: BigBirdAttention(HEADS, KEY_DIM, block_size=2, num_random_blocks=1,
                                         bias_initializer="random_normal"), 19, {}),
    "longformer": (lambda: LongformerAttention(HEADS, KEY_DIM, window=3, max_global_tokens=2,
                                               bias_initializer="random_normal"), 13, {}),
    "longformer_global": (
        lambda: LongformerAttention(HEADS, KEY_DIM, window=3, max_global_tokens=2, dilation=[1, 2],
                                    bias_initializer="random_normal"),
        13,
        {"global_attention_mask": np.eye(2, 13, dtype="int32")},
    ),
}


@pytest.mark.parametrize("name", sorted(SPARSE_LAYERS))
def test_sparse_attention_scales_each_heads_output(name):
    make_layer, length, kwargs = SPARSE_LAYERS[name]
    layer = make_layer()
    x = random_floats(np.random.default_rng(1), (BATCH, length, HIDDEN))
    kwargs = {"padding_mask": padding_mask([length, 9], length), **kwargs}
    outputs = to_numpy(layer(x, head_mask=PER_SEQUENCE, **kwargs))
    expected = scaled_reference(lambda: layer(x, **kwargs), [layer], PER_SEQUENCE)
    real = kwargs["padding_mask"].astype(bool)
    np.testing.assert_allclose(outputs[real], expected[real], atol=TOLERANCE, rtol=0)


def test_cached_attention_with_a_bias_and_with_a_cache():
    layer = CachedMultiHeadAttention(HEADS, KEY_DIM, use_bias=False)
    rng = np.random.default_rng(2)
    x = random_floats(rng, (BATCH, 4, HIDDEN))
    bias = random_floats(rng, (1, HEADS, 4, 4))
    outputs, probabilities = layer(x, attention_bias=bias, head_mask=PER_SEQUENCE,
                                   return_probabilities=True)
    expected = scaled_reference(lambda: layer(x, attention_bias=bias), [layer], PER_SEQUENCE)
    np.testing.assert_allclose(to_numpy(outputs), expected, atol=TOLERANCE, rtol=0)
    plain = to_numpy(layer(x, attention_bias=bias, return_probabilities=True)[1])
    np.testing.assert_allclose(to_numpy(probabilities), plain * PER_SEQUENCE[:, :, None, None],
                               atol=1e-7, rtol=0)
    cache = layer.compute_cache(x)
    step = x[:, :1]
    cached = to_numpy(layer(step, cache=cache, head_mask=PER_SEQUENCE)[0])
    expected = scaled_reference(lambda: layer(step, cache=cache)[0], [layer], PER_SEQUENCE)
    np.testing.assert_allclose(cached, expected, atol=TOLERANCE, rtol=0)


def test_blocks_pass_their_head_masks_on():
    rng = np.random.default_rng(3)
    x, memory = random_floats(rng, (BATCH, 5, HIDDEN)), random_floats(rng, (BATCH, 6, HIDDEN))
    encoder_block = EncoderBlock(HEADS, 16, dropout=0.0)
    encoder_block(x)  # builds it
    expected = scaled_reference(lambda: encoder_block(x), [encoder_block.attention_layer], PER_SEQUENCE)
    np.testing.assert_allclose(to_numpy(encoder_block(x, head_mask=PER_SEQUENCE)), expected,
                               atol=TOLERANCE, rtol=0)
    t5_block = T5Block(HEADS, 16, dropout=0.0)
    t5_block(x)
    expected = scaled_reference(lambda: t5_block(x), [t5_block.self_attention], PER_SEQUENCE)
    np.testing.assert_allclose(to_numpy(t5_block(x, head_mask=PER_SEQUENCE)), expected,
                               atol=TOLERANCE, rtol=0)
    decoder = CrossAttentionDecoderBlock(HEADS, 16, dropout=0.0)
    decoder(x, encoder_outputs=memory)
    for masks, attentions in (
        ({"head_mask": PER_SEQUENCE}, [decoder.self_attention]),
        ({"cross_attention_head_mask": PER_SEQUENCE}, [decoder.cross_attention]),
    ):
        expected = scaled_reference(lambda: decoder(x, encoder_outputs=memory), attentions,
                                    PER_SEQUENCE)
        np.testing.assert_allclose(to_numpy(decoder(x, encoder_outputs=memory, **masks)), expected,
                                   atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("shape", [(3,), (BATCH, 1, HEADS), ()])
def test_a_head_mask_of_the_wrong_shape_is_refused(shape):
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    x = np.ones((BATCH, 3, HIDDEN), "float32")
    with pytest.raises(ValueError, match=r"head_mask must have shape \(num_heads,\)"):
        layer(x, head_mask=np.ones(shape, "float32"))
