import keras
import numpy as np
import pytest

from kbert.layers import ReversibleEmbedding
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    random_floats,
    random_ids,
    run_standard_check,
    to_numpy,
)

VOCAB, HIDDEN, BATCH, LENGTH = 20, 16, 2, 8


def forward_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: ReversibleEmbedding(VOCAB, HIDDEN),
        inputs={"inputs": random_ids(rng, (BATCH, LENGTH), VOCAB)},
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def reverse_case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: ReversibleEmbedding(VOCAB, HIDDEN),
        inputs={"inputs": random_floats(rng, (BATCH, LENGTH, HIDDEN))},
        expected_shape=(BATCH, LENGTH, VOCAB),
        call_kwargs={"reverse": True},
    )


CASES = {"forward": forward_case, "reverse": reverse_case}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def test_lookup_and_reverse_match_numpy():
    rng = np.random.default_rng(3)
    layer = ReversibleEmbedding(VOCAB, HIDDEN)
    ids = random_ids(rng, (BATCH, LENGTH), VOCAB)
    embedded = to_numpy(layer(ids))
    table = to_numpy(layer.embeddings).astype(np.float64)
    np.testing.assert_allclose(embedded, table[ids], atol=1e-6, rtol=0)

    hidden = random_floats(rng, (BATCH, LENGTH, HIDDEN))
    logits = to_numpy(layer(hidden, reverse=True))
    np.testing.assert_allclose(logits, hidden.astype(np.float64) @ table.T, atol=1e-5, rtol=0)


def test_reverse_of_own_rows_scores_highest_on_diagonal_block():
    # Each row scored against the table: h·Wᵀ at its own id equals |row|².
    layer = ReversibleEmbedding(VOCAB, HIDDEN)
    ids = np.arange(VOCAB, dtype="int32")[None, :]
    logits = to_numpy(layer(layer(ids), reverse=True))[0]
    table = to_numpy(layer.embeddings).astype(np.float64)
    np.testing.assert_allclose(np.diag(logits), (table**2).sum(-1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("bad_id", [VOCAB, VOCAB + 7, -1])
def test_ids_outside_vocabulary_raise_in_eager_mode(bad_id):
    layer = ReversibleEmbedding(VOCAB, HIDDEN)
    ids = np.zeros((BATCH, LENGTH), "int32")
    ids[1, 3] = bad_id
    with pytest.raises(ValueError, match=rf"Token id {bad_id} is outside the valid range \[0, {VOCAB}\)"):
        layer(ids)


def test_reverse_with_wrong_width_raises_eager_and_symbolic():
    layer = ReversibleEmbedding(VOCAB, HIDDEN)
    layer.build(None)
    message = rf"expects hidden states of width {HIDDEN}.*received shape \(2, 8, 12\)"
    with pytest.raises(ValueError, match=message):
        layer(np.zeros((BATCH, LENGTH, 12), "float32"), reverse=True)
    message = rf"expects hidden states of width {HIDDEN}.*received shape \(None, 8, 12\)"
    with pytest.raises(ValueError, match=message):
        layer(keras.Input((LENGTH, 12)), reverse=True)
