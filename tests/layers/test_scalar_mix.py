import keras
import numpy as np
import pytest
from helpers import STANDARD_CHECKS, LayerCase, random_floats, run_standard_check, to_numpy

from kbert.layers import ScalarMix


def np_scalar_mix(layers, weights, gamma, mask=None, layer_norm=False, epsilon=1e-13):
    """docs/algorithms.md §14: γ·Σ softmax(w)_j h_j; AllenNLP's batch-wide masked layer norm per layer."""
    layers = [np.asarray(h, np.float64) for h in layers]
    if layer_norm:
        m = np.ones(layers[0].shape[:-1]) if mask is None else np.asarray(mask, np.float64)
        m = m[..., None] * np.ones_like(layers[0])
        normalized = []
        for h in layers:
            mean = (h * m).sum() / m.sum()
            variance = (((h - mean) * m) ** 2).sum() / m.sum()
            normalized.append((h - mean) / np.sqrt(variance + epsilon))
        layers = normalized
    softmax = np.exp(weights - np.max(weights))
    softmax /= softmax.sum()
    return gamma * sum(w * h for w, h in zip(softmax, layers))


def case(layer_norm):
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: ScalarMix(num_layers=3, layer_norm=layer_norm),
        inputs={"inputs": random_floats(rng, (2, 3, 5, 8), scale=2.0),
                "padding_mask": np.array([[1] * 5, [1, 1, 1, 0, 0]], "int32")},
        expected_shape=(2, 5, 8),
    )


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("check", STANDARD_CHECKS)
def test_standard(check, layer_norm, tmp_path):
    run_standard_check(check, case(layer_norm), tmp_path)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_matches_numpy_with_learned_weights_and_padding(layer_norm):
    rng = np.random.default_rng(1)
    layers = [random_floats(rng, (2, 6, 4), scale=3.0) + i for i in range(4)]
    mask = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], "int32")
    mix = ScalarMix(num_layers=4, layer_norm=layer_norm)
    mix.build([x.shape for x in layers])
    weights = np.array([0.5, -1.0, 2.0, 0.0], "float32")
    mix.layer_weights.assign(weights)
    mix.gamma.assign(1.7)
    expected = np_scalar_mix(layers, weights, 1.7, mask, layer_norm)
    np.testing.assert_allclose(to_numpy(mix(layers, padding_mask=mask)), expected, atol=1e-5, rtol=1e-5)
    stacked = np.stack(layers, axis=1)  # one (batch, layers, ...) tensor mixes the same
    np.testing.assert_allclose(to_numpy(mix(stacked, padding_mask=mask)), expected, atol=1e-5, rtol=1e-5)


def test_starts_as_the_plain_mean_and_learns_to_pick_a_layer():
    rng = np.random.default_rng(2)
    layers = random_floats(rng, (64, 3, 4), scale=1.0)
    target = layers[:, 2]  # only the last layer predicts the target
    inputs = keras.Input((3, 4))
    model = keras.Model(inputs, ScalarMix(num_layers=3)(inputs))
    np.testing.assert_allclose(to_numpy(model(layers)), layers.mean(axis=1), atol=1e-6)
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    model.fit(layers, target, epochs=60, batch_size=64, verbose=0)
    weights = to_numpy(keras.ops.softmax(model.layers[-1].layer_weights))
    assert weights[2] > 0.9, weights


@pytest.mark.parametrize(
    "layers, mask, message",
    [
        ([np.ones((2, 5, 8))] * 2, None, "built for 3 layers; received 2"),
        ([np.ones((2, 5, 8))] * 2 + [np.ones((2, 4, 8))], None, "must share one shape"),
        ([np.ones((2, 5, 8))] * 3, np.ones((2, 4)), "padding_mask must be \\(batch, sequence\\)"),
    ],
)
def test_bad_inputs_are_named(layers, mask, message):
    mix = ScalarMix(num_layers=3, layer_norm=True)
    with pytest.raises(ValueError, match=message):
        mix(layers, padding_mask=mask)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_layers"):
        ScalarMix(num_layers=0)
    with pytest.raises(ValueError, match="epsilon"):
        ScalarMix(num_layers=2, epsilon=-1.0)
