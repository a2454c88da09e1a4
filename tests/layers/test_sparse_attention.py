"""Helpers of the sparse kernels: attention by blocks, block groups and the grouped loop."""

import keras
import numpy as np
import pytest
from helpers import np_softmax, to_numpy

from kbert.layers import MultiHeadAttention, sparse_attention
from kbert.layers.sparse_attention import (
    attend_blocks,
    group_blocks,
    map_groups,
    neighbour_blocks,
    slice_blocks,
)


class _Layer:
    """Stands in for an attention layer: map_groups reads `dropout` only."""

    def __init__(self, dropout=0.0):
        self.dropout = dropout


def test_attend_blocks_equals_dense_attention_block_by_block():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 4, 2, 5)).astype("float32")  # (batch, blocks, queries, heads, dim)
    k, v = (rng.normal(size=(2, 3, 2, 6, 5)).astype("float32") for _ in range(2))  # heads first
    mask = rng.random((2, 3, 2, 4, 6)) > 0.3
    mask[0, 1, 1, 2] = False  # a row with every key masked stays finite
    layer = MultiHeadAttention(num_heads=2, key_dim=5)
    context = to_numpy(attend_blocks(layer.attend, q, k, v, mask, training=False))
    assert context.shape == (2, 3, 4, 2, 5)
    assert np.all(np.isfinite(context))
    scores = np.einsum("bnqhd,bnhkd->bnhqk", q, k).astype(np.float64) / np.sqrt(5)
    probabilities = np_softmax(np.where(mask, scores, -1e30))
    expected = np.einsum("bnhqk,bnhkd->bnqhd", probabilities, v)
    real = mask.any(-1).transpose(0, 1, 3, 2)  # (batch, blocks, queries, heads)
    np.testing.assert_allclose(context[real], expected[real], atol=1e-5, rtol=0)


def test_neighbour_blocks_are_the_three_shifted_blocks():
    x = keras.ops.convert_to_tensor(np.arange(2 * 7).reshape(2, 7).astype("float32"))
    parts = neighbour_blocks(x, 1, keras.ops.convert_to_tensor(2), 3)
    for shift, part in enumerate(parts):
        np.testing.assert_array_equal(to_numpy(part), to_numpy(x)[:, 2 + shift : 5 + shift])


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
