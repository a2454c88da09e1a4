"""Weighted losses against NumPy."""

import keras
import numpy as np

from kbert.training.losses import weighted_cross_entropy, weighted_mean


def test_weighted_cross_entropy_matches_numpy():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 3, 5)).astype("float32")
    labels = rng.integers(0, 5, (2, 3))
    weights = np.array([[1, 1, 0], [1, 0, 0]], "float32")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    expected = (ce * weights).sum() / (weights.sum() + 1e-5)
    loss = weighted_cross_entropy(labels, logits, weights)
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(loss)), expected, rtol=1e-5)


def test_weighted_mean_of_nothing_is_zero():
    assert float(keras.ops.convert_to_numpy(weighted_mean(np.ones(3), np.zeros(3)))) == 0.0
