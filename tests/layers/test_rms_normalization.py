import keras
import numpy as np
import pytest
from helpers import STANDARD_CHECKS, LayerCase, random_floats, run_standard_check, to_numpy

from kbert.layers import RMSNormalization


def np_rms_norm(x, scale, epsilon=1e-6):
    """docs/algorithms.md §8: `w·x/√(mean(x²)+ε)`, no mean subtraction, no bias."""
    x = np.asarray(x, np.float64)
    return scale * x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + epsilon)


def case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: RMSNormalization(),
        inputs={"inputs": random_floats(rng, (2, 5, 8), scale=3.0)},
        expected_shape=(2, 5, 8),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


@pytest.mark.parametrize("epsilon", [1e-6, 0.5])
def test_matches_numpy(epsilon):
    rng = np.random.default_rng(1)
    layer = RMSNormalization(epsilon=epsilon)
    x = random_floats(rng, (3, 4, 6), scale=2.0) + 1.5  # a non-zero mean is kept
    layer.build(x.shape)
    scale = rng.normal(size=(6,)).astype("float32")
    layer.scale.assign(scale)
    np.testing.assert_allclose(to_numpy(layer(x)), np_rms_norm(x, scale, epsilon), atol=1e-5, rtol=0)


def test_no_bias_and_scale_starts_at_one():
    layer = RMSNormalization()
    layer.build((None, 8))
    assert [w.name for w in layer.weights] == ["scale"]
    np.testing.assert_array_equal(to_numpy(layer.scale), np.ones(8))


def test_float16_statistics_do_not_overflow():
    # 300² = 90,000 overflows float16 (max 65,504): the statistics must be float32.
    keras.config.set_dtype_policy("mixed_float16")
    layer = RMSNormalization()
    x = np.full((1, 2, 4), 300.0, "float32")
    outputs = keras.ops.convert_to_numpy(keras.ops.cast(layer(x), "float32"))
    np.testing.assert_allclose(outputs, np.ones((1, 2, 4)), atol=1e-3)


def test_rejects_unknown_width():
    with pytest.raises(ValueError, match="known last dimension"):
        RMSNormalization().build((2, None))
