"""to_long_context: the Longformer recipe (tiled positions, sparse attention, copied weights)."""

import numpy as np
import pytest
from helpers import to_numpy

import kbert

SHORT = dict(
    vocabulary_size=40,
    num_layers=2,
    num_heads=2,
    hidden_dim=8,
    intermediate_dim=16,
    max_positions=10,  # RoBERTa: 8 real positions after the offset of 2
    dropout=0.0,
)


@pytest.fixture(scope="module")
def short():
    """The short RoBERTa-style encoder; `to_long_context` only reads it."""
    return kbert.models.build("roberta_base", **SHORT)


def inputs(length, real=None, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((2, length), "int32")
    if real is not None:
        mask[1, real:] = 0
    ids = rng.integers(3, SHORT["vocabulary_size"], (2, length)).astype("int32")
    ids[mask == 0] = 1
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask}


@pytest.mark.parametrize(
    "attention, kwargs",
    [("longformer", {"window": 8}), ("bigbird", {"block_size": 2, "num_random_blocks": 1})],
)
def test_same_outputs_as_the_short_model_where_the_pattern_is_full(short, attention, kwargs):
    long = kbert.models.to_long_context(short, max_length=32, attention=attention, attention_kwargs=kwargs)
    assert long.max_positions == 34 and long.attention == attention
    # 8 tokens: the window (8) or BigBird's full-attention length (14) covers them all.
    batch = inputs(8, real=5)
    expected = to_numpy(short(batch))
    actual = to_numpy(long(batch))
    real = batch["padding_mask"].astype(bool)
    np.testing.assert_allclose(
        actual["sequence_output"][real], expected["sequence_output"][real], atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(actual["pooled_output"], expected["pooled_output"], atol=1e-5)


def test_positions_are_tiled_and_global_projections_copied(short):
    long = kbert.models.to_long_context(short, max_length=20, attention_kwargs={"window": 2})
    old = to_numpy(short.embeddings.position_embedding.embeddings)
    new = to_numpy(long.embeddings.position_embedding.embeddings)
    assert new.shape == (22, 8)
    np.testing.assert_array_equal(new[:2], old[:2])  # RoBERTa's reserved rows
    expected = np.concatenate([old[2:]] * 3)[:20]  # rows 2..9 repeated from row 2
    np.testing.assert_array_equal(new[2:], expected)
    for layer in long.transformer_layers:
        attention = layer.attention_layer
        for name in ("query", "key", "value"):
            np.testing.assert_array_equal(
                to_numpy(getattr(attention, f"{name}_global_dense").kernel),
                to_numpy(getattr(attention, f"{name}_dense").kernel),
            )
    np.testing.assert_array_equal(
        to_numpy(long.token_embedding.embeddings), to_numpy(short.token_embedding.embeddings)
    )


def test_bert_positions_from_zero_and_bad_length():
    short = kbert.models.build("bert_tiny", num_layers=1, vocabulary_size=30, max_positions=6)
    long = kbert.models.to_long_context(
        short, max_length=15, attention="bigbird", attention_kwargs={"block_size": 2}
    )
    old = to_numpy(short.embeddings.position_embedding.embeddings)
    new = to_numpy(long.embeddings.position_embedding.embeddings)
    np.testing.assert_array_equal(new, np.concatenate([old] * 3)[:15])
    assert long.num_segments == 2 and long.attention_kwargs == {"block_size": 2}
    with pytest.raises(ValueError, match="max_length must be a positive integer"):
        kbert.models.to_long_context(short, max_length=0)
