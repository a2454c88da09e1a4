import keras
import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    np_gelu_tanh,
    np_softmax,
    padding_mask,
    random_floats,
    run_standard_check,
    to_numpy,
)

from kbert.layers import TransformerDecoder

BATCH, LENGTH, SOURCE, WIDTH, HEADS, FF = 2, 5, 7, 12, 3, 10


def np_rms(x, scale, epsilon=1e-6):
    return scale * x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon)


def np_attention(x, memory, kernels, key_dim, bias=None, mask=None):
    """T5 attention (ALGORITHMS.md §3): no biases, no 1/√d scaling."""
    q_kernel, k_kernel, v_kernel, o_kernel = kernels
    batch, q_len, _ = x.shape

    def heads(y, kernel):
        return (y @ kernel).reshape(batch, y.shape[1], HEADS, key_dim)

    scores = np.einsum("bqnh,bknh->bnqk", heads(x, q_kernel), heads(memory, k_kernel))
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = np.where(mask[:, None], scores, -np.inf)
    context = np.einsum("bnqk,bknh->bqnh", np_softmax(scores), heads(memory, v_kernel))
    return context.reshape(batch, q_len, -1) @ o_kernel


def np_block(layer, x, memory=None, padding=None, memory_padding=None, bias=None):
    """T5's pre-RMSNorm block, with weights read from `layer`."""
    w = lambda v: to_numpy(v).astype(np.float64)  # noqa: E731
    kernels = lambda a: [w(getattr(a, f"{n}_dense").kernel) for n in ("query", "key", "value", "output")]  # noqa: E731
    key_dim = layer.self_attention.key_dim
    x = x.astype(np.float64)
    batch, length, _ = x.shape
    mask = np.ones((batch, length, length), bool)
    if layer.causal:
        mask &= np.tril(np.ones((length, length), bool))[None]
    if padding is not None:
        mask &= padding.astype(bool)[:, None, :]
    h = np_rms(x, w(layer.self_attention_layer_norm.scale))
    x = x + np_attention(h, h, kernels(layer.self_attention), key_dim, bias, mask)
    if layer.use_cross_attention:
        cross_mask = np.ones((batch, length, memory.shape[1]), bool)
        if memory_padding is not None:
            cross_mask &= memory_padding.astype(bool)[:, None, :]
        h = np_rms(x, w(layer.cross_attention_layer_norm.scale))
        x = x + np_attention(h, memory.astype(np.float64), kernels(layer.cross_attention), key_dim, None, cross_mask)
    h = np_rms(x, w(layer.ffn_layer_norm.scale))
    if layer.use_gated_activation:
        hidden = np_gelu_tanh(h @ w(layer.intermediate_dense.kernel)) * (h @ w(layer.gate_dense.kernel))
    else:
        hidden = np.maximum(h @ w(layer.intermediate_dense.kernel), 0.0)
    return x + hidden @ w(layer.output_dense.kernel)


def decoder_case(gated=False):
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: TransformerDecoder(
            HEADS,
            FF,
            dropout=0.1,
            activation="gelu_approximate" if gated else "relu",
            use_gated_activation=gated,
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


def encoder_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: TransformerDecoder(HEADS, FF, use_cross_attention=False, causal=False),
        inputs={
            "inputs": random_floats(rng, (BATCH, LENGTH, WIDTH)),
            "padding_mask": padding_mask([LENGTH, 3], LENGTH),
        },
        expected_shape=(BATCH, LENGTH, WIDTH),
    )


CASES = {"decoder": decoder_case, "gated_decoder": lambda: decoder_case(True), "encoder": encoder_case}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, decoder_case(), tmp_path)


# The other configurations run the same code with parts switched off or on: the
# cheap checks here, their numerics in test_matches_numpy.
@pytest.mark.parametrize("check", ["config_round_trip", "symbolic_and_eager"])
@pytest.mark.parametrize("case_name", ["encoder", "gated_decoder"])
def test_config_and_shapes_of_other_configurations(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_matches_numpy(case_name):
    case = CASES[case_name]()
    layer = case.make_layer()
    outputs = to_numpy(case.call(layer, case.inputs))
    i = case.inputs
    expected = np_block(
        layer, i["inputs"], i.get("encoder_outputs"), i["padding_mask"], i.get("encoder_padding_mask"), i.get("attention_bias")
    )
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_t5_initialisation_stds():
    keras.utils.set_random_seed(0)
    layer = TransformerDecoder(4, 256, key_dim=32, initializer_factor=1.0)
    layer.build((None, None, 64))
    std = lambda v: float(np.std(to_numpy(v)))  # noqa: E731
    attention = layer.self_attention
    assert std(attention.query_dense.kernel) == pytest.approx((64 * 32) ** -0.5, rel=0.1)
    assert std(attention.key_dense.kernel) == pytest.approx(64**-0.5, rel=0.1)
    assert std(attention.output_dense.kernel) == pytest.approx((4 * 32) ** -0.5, rel=0.1)
    assert std(layer.output_dense.kernel) == pytest.approx(256**-0.5, rel=0.1)
    assert not [w for w in layer.weights if "bias" in w.name]


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


def test_cached_steps_equal_full_call():
    case = decoder_case(gated=True)
    layer = case.make_layer()
    i = case.inputs
    bias = i["attention_bias"]
    full = to_numpy(
        layer(i["inputs"], encoder_outputs=i["encoder_outputs"], encoder_padding_mask=i["encoder_padding_mask"], attention_bias=bias)
    )
    cache = np.zeros((BATCH, HEADS, 2, LENGTH, WIDTH // HEADS), "float32")
    cross = layer.cross_attention.compute_cache(i["encoder_outputs"])
    for step in range(LENGTH):
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
    layer = TransformerDecoder(HEADS, FF)
    x = np.ones((1, 2, WIDTH), "float32")
    with pytest.raises(ValueError, match="pass encoder_outputs"):
        layer(x)
    with pytest.raises(ValueError, match="together"):
        layer(x, encoder_outputs=x, self_attention_cache=np.zeros((1, HEADS, 2, 2, 4), "float32"))
    with pytest.raises(ValueError, match="not divisible"):
        TransformerDecoder(5, FF).build((1, 2, WIDTH))
    with pytest.raises(ValueError, match="expects inputs of shape"):
        TransformerDecoder(HEADS, FF).build((2, WIDTH))
