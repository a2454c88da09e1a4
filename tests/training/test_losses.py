"""Weighted losses against NumPy."""

import keras
import numpy as np

from kbert.training.losses import softened_kl, weighted_cross_entropy, weighted_mean


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


def test_softened_kl_matches_numpy():
    rng = np.random.default_rng(1)
    teacher, student = (3 * rng.standard_normal((4, 5)).astype("float32") for _ in range(2))
    t, s = (x / 2.0 - np.log(np.exp(x / 2.0).sum(-1, keepdims=True)) for x in (teacher, student))
    expected = 4.0 * (np.exp(t) * (t - s)).sum(-1)  # T² · KL(softmax(t/T) ‖ softmax(s/T)), T = 2
    np.testing.assert_allclose(keras.ops.convert_to_numpy(softened_kl(teacher, student, 2.0)), expected, rtol=1e-5)
