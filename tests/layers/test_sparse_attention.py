"""Helpers of the sparse kernels: the piecewise softmax, block groups and the grouped loop."""

import keras
import numpy as np
import pytest
from helpers import np_softmax, to_numpy

from kbert.layers import sparse_attention
from kbert.layers.attention_mask import MASKED_SCORE
from kbert.layers.sparse_attention import (
    group_blocks,
    map_groups,
    slice_blocks,
    softmax_pieces,
)


class _Layer:
    """Stands in for an attention layer: map_groups reads `dropout` only."""

    def __init__(self, dropout=0.0):
        self.dropout = dropout


def test_softmax_pieces_equal_one_softmax_over_the_concatenation():
    rng = np.random.default_rng(0)
    scores = [rng.normal(size=(2, 3, w)).astype("float32") for w in (4, 1, 5)]
    masks = [rng.random((2, 3, w)) > 0.3 for w in (4, 1, 5)]
    masks[0][0, 0] = masks[1][0, 0] = masks[2][0, 0] = False  # a row with every key masked
    pieces = softmax_pieces(
        list(zip(scores, masks)), "float32", keras.layers.Dropout(0.0), training=False
    )
    joined = np.concatenate([np.where(m, s, MASKED_SCORE) for s, m in zip(scores, masks)], -1)
    expected = np.split(np_softmax(joined.astype(np.float64)), [4, 5], axis=-1)
    for actual, wanted in zip(pieces, expected):
        np.testing.assert_allclose(to_numpy(actual), wanted, atol=1e-6, rtol=0)
    # The fully masked row is uniform over all 10 keys, as a softmax of equal scores.
    np.testing.assert_allclose(to_numpy(pieces[0])[0, 0], 0.1, atol=1e-6)


@pytest.mark.parametrize(
    "num_blocks, block_queries, expected",
    [(16, 256, (4, 4)), (10, 256, (4, 3)), (3, 256, (3, 1)), (5, 2048, (1, 5))],
)
def test_group_blocks_cover_every_block(num_blocks, block_queries, expected):
    group, groups = group_blocks(num_blocks, block_queries)
    assert (group, groups) == expected
    assert group * groups >= num_blocks > group * (groups - 1)


def test_slice_blocks_takes_a_traced_start():
    x = np.arange(2 * 6 * 3).reshape(2, 6, 3).astype("float32")
    sliced = slice_blocks(keras.ops.convert_to_tensor(x), 1, keras.ops.convert_to_tensor(2), 3)
    np.testing.assert_array_equal(to_numpy(sliced), x[:, 2:5])


@pytest.mark.parametrize("dropout, training", [(0.0, True), (0.5, False), (0.5, True)])
def test_map_groups_joins_the_groups_in_order(dropout, training, monkeypatch):
    monkeypatch.setattr(sparse_attention, "GROUP_QUERIES", 4)
    x = keras.ops.convert_to_tensor(np.arange(2 * 3 * 6 * 2).reshape(2, 3, 6, 2).astype("float32"))
    group, groups = group_blocks(6, 2)  # 2 blocks a group, 3 groups

    def double(start):
        return 2.0 * slice_blocks(x, 2, start, group)

    # A loop (ops.map) without active dropout, the groups unrolled with it: the same result.
    joined = map_groups(_Layer(dropout), double, groups, group, training, axis=2)
    np.testing.assert_array_equal(to_numpy(joined), 2.0 * to_numpy(x))
