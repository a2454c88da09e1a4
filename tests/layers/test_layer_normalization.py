import keras
import numpy as np
import pytest
from helpers import STANDARD_CHECKS, LayerCase, random_floats, run_standard_check, to_numpy

from kbert.backend import torch_ops
from kbert.layers import LayerNormalization


def np_layer_norm(x, gamma, beta, epsilon):
    """`γ·(x − mean)/√(var + ε) + β` over the last axis."""
    x = np.asarray(x, np.float64)
    mean, variance = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(variance + epsilon) + beta


def case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: LayerNormalization(epsilon=1e-5),
        inputs={"inputs": random_floats(rng, (2, 5, 8), scale=3.0)},
        expected_shape=(2, 5, 8),
    )


@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


def test_matches_numpy_and_keras():
    """Against NumPy (atol 1e-5) and Keras' own layer with the same weights (atol 1e-6)."""
    rng = np.random.default_rng(1)
    x = random_floats(rng, (3, 4, 6), scale=2.0) + 1.5
    layer, reference = LayerNormalization(epsilon=1e-5), keras.layers.LayerNormalization(epsilon=1e-5)
    layer.build(x.shape)
    reference.build(x.shape)
    weights = [rng.normal(size=(6,)).astype("float32") for _ in range(2)]
    layer.set_weights(weights)
    reference.set_weights(weights)
    outputs = to_numpy(layer(x))
    np.testing.assert_allclose(outputs, np_layer_norm(x, *weights, 1e-5), atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs, to_numpy(reference(x)), atol=1e-6, rtol=0)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="direct calls are PyTorch's")
def test_eager_torch_call_skips_keras_bookkeeping():
    layer = LayerNormalization()
    x = keras.ops.ones((2, 3, 4))
    layer(x)  # builds it, through Keras
    assert torch_ops.call_directly(layer, (x,), {}) is not None


@pytest.mark.parametrize("options", [{"axis": [1, 2]}, {"rms_scaling": True}, {"center": False}])
def test_other_forms_equal_keras(options):
    """Other axes and RMS scaling go through Keras' own call; no centering through kbert's (atol 1e-6)."""
    rng = np.random.default_rng(2)
    x = random_floats(rng, (2, 3, 4), scale=2.0)
    layer, reference = LayerNormalization(**options), keras.layers.LayerNormalization(**options)
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(reference(x)), atol=1e-6, rtol=0)


def test_mixed_float16_equals_keras():
    """float16 compute with float32 statistics, as Keras computes it (atol 1e-3)."""
    keras.config.set_dtype_policy("mixed_float16")
    x = np.full((1, 2, 4), 300.0, "float32") + np.arange(4, dtype="float32")
    layer, reference = LayerNormalization(), keras.layers.LayerNormalization()
    outputs = to_numpy(keras.ops.cast(layer(x), "float32"))
    expected = to_numpy(keras.ops.cast(reference(x), "float32"))
    np.testing.assert_allclose(outputs, expected, atol=1e-3, rtol=0)
