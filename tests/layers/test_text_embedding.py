import numpy as np
import pytest
from helpers import (
    STANDARD_CHECKS,
    LayerCase,
    dense_weights,
    np_dense,
    np_layer_norm,
    padding_mask,
    random_ids,
    run_standard_check,
    to_numpy,
)

from kbert.layers import TextEmbedding

VOCAB, HIDDEN, BATCH, LENGTH, MAX_POSITIONS = 30, 16, 2, 8, 16
LENGTHS = [LENGTH, 5]


def bert_inputs(rng, num_segments=2):
    inputs = {"token_ids": random_ids(rng, (BATCH, LENGTH), VOCAB)}
    if num_segments:
        inputs["segment_ids"] = random_ids(rng, (BATCH, LENGTH), num_segments)
    inputs["padding_mask"] = padding_mask(LENGTHS, LENGTH)
    return inputs


def bert_case():
    return LayerCase(
        make_layer=lambda: TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS),
        inputs=bert_inputs(np.random.default_rng(0)),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def albert_case():
    # Factorized embedding: tables of width 8, projected to 16.
    return LayerCase(
        make_layer=lambda: TextEmbedding(
            VOCAB, HIDDEN, max_positions=MAX_POSITIONS, embedding_dim=8
        ),
        inputs=bert_inputs(np.random.default_rng(0)),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def roberta_case():
    # Positions start at 2; one segment; a table of exactly LENGTH + 2 rows.
    return LayerCase(
        make_layer=lambda: TextEmbedding(
            VOCAB,
            HIDDEN,
            max_positions=LENGTH + 2,
            num_segments=1,
            position_offset=2,
            layer_norm_epsilon=1e-5,
        ),
        inputs=bert_inputs(np.random.default_rng(0), num_segments=1),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


def distilbert_case():
    return LayerCase(
        make_layer=lambda: TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS, num_segments=0),
        inputs=bert_inputs(np.random.default_rng(0), num_segments=0),
        expected_shape=(BATCH, LENGTH, HIDDEN),
    )


CASES = {
    "bert": bert_case,
    "albert_factorized": albert_case,
    "roberta_offset": roberta_case,
    "distilbert_no_segments": distilbert_case,
}


@pytest.mark.parametrize("check", STANDARD_CHECKS)
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_standard(check, case_name, tmp_path):
    run_standard_check(check, CASES[case_name](), tmp_path)


def np_text_embedding(layer, token_ids, segment_ids, mask):
    """LN(Wtok[ids] + Wpos[positions] + Wtype[seg]) (then the E->H Dense when present)."""
    tokens = to_numpy(layer.token_embedding.embeddings).astype(np.float64)
    positions_table = to_numpy(layer.position_embedding.embeddings).astype(np.float64)
    if layer.position_offset:
        # RoBERTa / Hugging Face: cumsum(mask)·mask + padding_idx, padding_idx = offset - 1.
        positions = np.cumsum(mask, axis=1) * mask + (layer.position_offset - 1)
    else:
        positions = np.broadcast_to(np.arange(token_ids.shape[1]), token_ids.shape)
    x = tokens[token_ids] + positions_table[positions]
    if layer.num_segments:
        x = x + to_numpy(layer.segment_embedding.embeddings).astype(np.float64)[segment_ids]
    gamma, beta = to_numpy(layer.layer_norm.gamma), to_numpy(layer.layer_norm.beta)
    x = np_layer_norm(x, gamma, beta, epsilon=layer.layer_norm_epsilon)
    if layer.projection is not None:
        x = np_dense(x, *dense_weights(layer.projection))
    return x


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_matches_numpy_reference(case_name):
    case = CASES[case_name]()
    layer = case.make_layer()
    inputs = case.inputs
    outputs = to_numpy(case.call(layer, inputs, training=False))
    expected = np_text_embedding(
        layer, inputs["token_ids"], inputs.get("segment_ids"), inputs["padding_mask"]
    )
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)


def test_roberta_positions_skip_padding():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=LENGTH + 2, num_segments=1, position_offset=2)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], "int32")
    # Hugging Face's create_position_ids_from_input_ids with padding_idx = 1.
    expected_positions = np.array([[2, 3, 4, 5, 6, 1, 1, 1], [2, 3, 4, 5, 6, 7, 8, 9]])
    np.testing.assert_array_equal(np.cumsum(mask, 1) * mask + 1, expected_positions)
    ids = np.zeros((BATCH, LENGTH), "int32")
    outputs = to_numpy(layer(ids, padding_mask=mask))
    expected = np_text_embedding(layer, ids, np.zeros_like(ids), mask)
    np.testing.assert_allclose(outputs, expected, atol=1e-5, rtol=0)
    # Padded slots all read the padding row, so with equal tokens they are identical.
    np.testing.assert_allclose(outputs[0, 5], outputs[0, 7], atol=0)
    # Without a mask every token is real: positions 2 .. n+1.
    np.testing.assert_allclose(
        to_numpy(layer(ids)), np_text_embedding(layer, ids, np.zeros_like(ids), np.ones_like(ids)), atol=1e-5
    )


def test_missing_segment_ids_mean_segment_zero():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS)
    ids = random_ids(np.random.default_rng(2), (BATCH, LENGTH), VOCAB)
    np.testing.assert_allclose(
        to_numpy(layer(ids)), to_numpy(layer(ids, segment_ids=np.zeros_like(ids))), atol=0
    )


def test_dropout_only_in_training():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS, dropout=0.5)
    ids = random_ids(np.random.default_rng(2), (BATCH, LENGTH), VOCAB)
    inference = to_numpy(layer(ids))
    np.testing.assert_allclose(to_numpy(layer(ids, training=False)), inference, atol=0)
    trained = to_numpy(layer(ids, training=True))
    assert np.all(np.isfinite(trained))
    dropped = trained == 0
    assert 0 < dropped.mean() < 1
    # Kept units are scaled by 1/(1-rate).
    np.testing.assert_allclose(trained[~dropped], 2.0 * inference[~dropped], atol=1e-5, rtol=1e-5)


def test_wrong_rank_raises():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS)
    with pytest.raises(ValueError, match=r"expects token_ids of shape \(batch, sequence\); received shape \(2, 8, 1\)"):
        layer(np.zeros((BATCH, LENGTH, 1), "int32"))


def test_sequence_longer_than_position_table_raises():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS)
    layer(np.zeros((BATCH, LENGTH), "int32"))
    with pytest.raises(ValueError, match=rf"Sequence length {MAX_POSITIONS + 1} exceeds the {MAX_POSITIONS} positions"):
        layer(np.zeros((BATCH, MAX_POSITIONS + 1), "int32"))


def test_offset_reduces_usable_positions():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=LENGTH + 2, num_segments=1, position_offset=2)
    layer(np.zeros((BATCH, LENGTH), "int32"))
    message = rf"Sequence length {LENGTH + 1} exceeds the {LENGTH} positions.*{LENGTH + 2} rows, offset 2"
    with pytest.raises(ValueError, match=message):
        layer(np.zeros((BATCH, LENGTH + 1), "int32"))


@pytest.mark.parametrize("bad_id", [VOCAB, -1])
def test_token_ids_outside_vocabulary_raise(bad_id):
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS)
    ids = np.zeros((BATCH, LENGTH), "int32")
    ids[1, 2] = bad_id
    with pytest.raises(ValueError, match=rf"Token id {bad_id} is outside the valid range \[0, {VOCAB}\)"):
        layer(ids)


def test_segment_ids_outside_range_raise():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS, num_segments=2)
    ids = np.zeros((BATCH, LENGTH), "int32")
    segments = np.zeros((BATCH, LENGTH), "int32")
    segments[0, 4] = 2
    with pytest.raises(ValueError, match=r"Segment id 2 is outside the valid range \[0, 2\)"):
        layer(ids, segment_ids=segments)


@pytest.mark.parametrize("position_offset", [0, 2])
def test_padding_mask_of_wrong_rank_raises(position_offset):
    layer = TextEmbedding(
        VOCAB, HIDDEN, max_positions=MAX_POSITIONS, num_segments=1, position_offset=position_offset
    )
    ids = np.zeros((BATCH, LENGTH), "int32")
    with pytest.raises(
        ValueError, match=r"padding_mask must have shape \(batch, sequence\); received shape \(2, 8, 8\)"
    ):
        layer(ids, padding_mask=np.ones((BATCH, LENGTH, LENGTH), "int32"))


def test_segment_ids_of_wrong_rank_raise():
    layer = TextEmbedding(VOCAB, HIDDEN, max_positions=MAX_POSITIONS)
    ids = np.zeros((BATCH, LENGTH), "int32")
    with pytest.raises(
        ValueError, match=r"segment_ids must have shape \(batch, sequence\); received shape \(2, 8, 1\)"
    ):
        layer(ids, segment_ids=np.zeros((BATCH, LENGTH, 1), "int32"))


def test_config_stores_every_argument():
    layer = TextEmbedding(
        VOCAB, HIDDEN, max_positions=12, num_segments=3, embedding_dim=8,
        position_offset=2, dropout=0.2, layer_norm_epsilon=1e-5, initializer_range=0.05,
    )
    config = layer.get_config()
    expected = dict(
        vocabulary_size=VOCAB, hidden_dim=HIDDEN, max_positions=12, num_segments=3, embedding_dim=8,
        position_offset=2, dropout=0.2, layer_norm_epsilon=1e-5, initializer_range=0.05,
    )
    assert {key: config[key] for key in expected} == expected
