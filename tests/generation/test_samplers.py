"""kbert.generation.samplers against NumPy: the logit filters, the draws, the beam step and the
best-beam choice. (Both generators use them; their loops are tested in the files beside this one.)"""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from kbert.generation import samplers
from kbert.backend.ops import masked_score

VOCABULARY = 12


def random_logits(rows=5, seed=0):
    return np.random.default_rng(seed).normal(0, 2, (rows, VOCABULARY)).astype("float32")


def np_filter(logits, temperature=1.0, top_k=None, top_p=None):
    """docs/algorithms.md §17: temperature, then top-k, then the smallest nucleus of mass >= top_p."""
    logits = logits.astype(np.float64) / temperature
    keep = np.ones(logits.shape, bool)
    for row, values in enumerate(logits):
        order = np.argsort(-values)
        if top_k is not None:
            keep[row, order[top_k:]] = False
        if top_p is not None:
            kept = order[keep[row, order]]
            probabilities = np.exp(values[kept] - values[kept].max())
            probabilities /= probabilities.sum()
            size = int(np.searchsorted(np.cumsum(probabilities), top_p) + 1)
            keep[row, kept[size:]] = False
    return np.where(keep, logits, masked_score("float32"))


@pytest.mark.parametrize(
    "options",
    [
        dict(temperature=0.7),
        dict(top_k=3),
        dict(top_p=0.6),
        dict(temperature=2.0, top_k=5, top_p=0.8),
        dict(top_k=1, top_p=0.01),
    ],
)
def test_filter_logits_matches_numpy(options):
    logits = random_logits()
    filtered = to_numpy(samplers.filter_logits(keras.ops.convert_to_tensor(logits), **options))
    np.testing.assert_allclose(filtered, np_filter(logits, **options), rtol=1e-6)


def test_greedy_is_argmax_and_keeps_the_seed():
    logits = random_logits()
    generator = keras.random.SeedGenerator(0)
    ids, state = samplers.next_tokens(keras.ops.convert_to_tensor(logits), generator.state.value, generator)
    np.testing.assert_array_equal(to_numpy(ids), logits.argmax(-1))
    np.testing.assert_array_equal(to_numpy(state), to_numpy(generator.state))


def test_samples_follow_the_filtered_distribution():
    # 20000 draws of one row: frequencies within 4 standard errors of softmax(filtered logits).
    draws = 20000
    logits = np.repeat(random_logits(1, seed=2), draws, axis=0)
    generator = keras.random.SeedGenerator(7)
    options = dict(temperature=1.5, top_k=6, top_p=0.9)
    ids, state = samplers.next_tokens(
        keras.ops.convert_to_tensor(logits), generator.state.value, generator, "sample", **options
    )
    expected = np.exp(np_filter(logits[:1], **options)[0])
    expected /= expected.sum()
    frequencies = np.bincount(to_numpy(ids), minlength=VOCABULARY) / draws
    error = np.sqrt(expected * (1 - expected) / draws)
    assert np.all(np.abs(frequencies - expected) <= 4 * error + 1e-12)
    assert not np.array_equal(to_numpy(state), to_numpy(generator.state))  # the seed moved on


def np_beam_step(logits, scores, finished, beams, pad_id):
    log_p = logits - logits.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    padding = np.full(VOCABULARY, masked_score("float32"))
    padding[pad_id] = 0.0
    log_p[finished] = padding
    candidates = (scores.reshape(-1, 1) + log_p).reshape(len(scores), beams * VOCABULARY)
    best = np.argsort(-candidates, axis=-1, kind="stable")[:, :beams]
    order = (np.arange(len(scores))[:, None] * beams + best // VOCABULARY).reshape(-1)
    return order, (best % VOCABULARY).reshape(-1), np.take_along_axis(candidates, best, -1)


def test_beam_step_matches_numpy():
    batch, beams, pad_id = 2, 3, 0
    logits = random_logits(batch * beams, seed=3)
    scores = np.random.default_rng(4).normal(-3, 1, (batch, beams)).astype("float32")
    finished = np.array([False, True, False, False, False, True])
    order, ids, new_scores = samplers.beam_step(
        *map(keras.ops.convert_to_tensor, (logits, scores, finished)), beams, pad_id
    )
    expected = np_beam_step(logits.astype(np.float64), scores, finished, beams, pad_id)
    np.testing.assert_array_equal(to_numpy(order), expected[0])
    np.testing.assert_array_equal(to_numpy(ids), expected[1])
    np.testing.assert_allclose(to_numpy(new_scores), expected[2], atol=1e-5)
    # The finished beam (row 1) goes on with the pad id at its unchanged score.
    assert scores[0, 1] in to_numpy(new_scores)[0]


def test_best_beams_normalise_by_length():
    end = 1
    tokens = np.array([[5, 1, 0, 0], [5, 6, 7, 8], [4, 4, 1, 0], [9, 9, 9, 9]], "int32")
    scores = np.array([[-2.0, -6.0], [-3.3, -4.0]], "float32")
    lengths = np.array([[2, 4], [3, 4]], "float32")
    for penalty in (0.0, 1.0, 2.0):
        best = to_numpy(samplers.best_beams(tokens, scores, 2, end, penalty))
        choice = np.argmax(scores / lengths**penalty, axis=-1)
        np.testing.assert_array_equal(best, tokens.reshape(2, 2, 4)[np.arange(2), choice])


def test_initial_scores_keep_one_live_beam():
    np.testing.assert_array_equal(
        to_numpy(samplers.initial_beam_scores(2, 3)), [[0, masked_score("float32"), masked_score("float32")]] * 2
    )
