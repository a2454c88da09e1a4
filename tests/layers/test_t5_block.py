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

from kbert.layers import T5Block

BATCH, LENGTH, WIDTH, HEADS, FF = 2, 5, 12, 3, 10


def encoder_case(**options):
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: T5Block(HEADS, FF, dropout=0.1, **options),
        inputs={
            "inputs": random_floats(rng, (BATCH, LENGTH, WIDTH)),
            "padding_mask": padding_mask([LENGTH, 3], LENGTH),
            "attention_bias": random_floats(rng, (BATCH, HEADS, LENGTH, LENGTH)),
        },
        expected_shape=(BATCH, LENGTH, WIDTH),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, encoder_case(), tmp_path)


@pytest.mark.parametrize(
    "options", [{}, {"activation": "gelu_approximate", "use_gated_activation": True}]
)
def test_matches_numpy(options):
    case = encoder_case(**options)
    layer = case.make_layer()
    outputs = to_numpy(case.call(layer, case.inputs))
    i = case.inputs
    expected = np_t5_block(layer, i["inputs"], padding=i["padding_mask"], bias=i["attention_bias"])
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_attends_both_ways():
    # Not causal: changing the last position changes the first.
    layer = encoder_case().make_layer()
    x = encoder_case().inputs["inputs"]
    before = to_numpy(layer(x))
    x = x.copy()
    x[:, -1] += 5.0
    assert np.abs(to_numpy(layer(x))[:, 0] - before[:, 0]).max() > 1e-3


def test_t5_initialisation_stds():
    keras.utils.set_random_seed(0)
    layer = T5Block(4, 256, key_dim=32, initializer_factor=1.0)
    layer.build((None, None, 64))
    std = lambda v: float(np.std(to_numpy(v)))  # noqa: E731
    attention = layer.self_attention
    assert std(attention.query_dense.kernel) == pytest.approx((64 * 32) ** -0.5, rel=0.1)
    assert std(attention.key_dense.kernel) == pytest.approx(64**-0.5, rel=0.1)
    assert std(attention.output_dense.kernel) == pytest.approx((4 * 32) ** -0.5, rel=0.1)
    assert std(layer.output_dense.kernel) == pytest.approx(256**-0.5, rel=0.1)
    assert not [w for w in layer.weights if "bias" in w.name]


def test_errors():
    with pytest.raises(ValueError, match="not divisible"):
        T5Block(5, FF).build((1, 2, WIDTH))
    with pytest.raises(ValueError, match="T5Block expects inputs of shape"):
        T5Block(HEADS, FF).build((2, WIDTH))
