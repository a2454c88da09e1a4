"""`kept_heads` (which heads each layer keeps, and its errors) and `pruned_attention_values`
(an attention layer's weights sliced to the kept heads), against NumPy indexing."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from kbert.analysis.pruned_attention import head_slices, kept_heads, pruned_attention_values
from kbert.layers import MultiHeadAttention


def test_kept_heads_removes_the_named_heads_per_layer():
    assert kept_heads([4, 4, 2], {0: [3, 1], 2: [0]}) == [[0, 2], [0, 1, 2, 3], [1]]
    assert kept_heads([3], {np.int64(0): []}) == [[0, 1, 2]]


@pytest.mark.parametrize(
    "heads_to_prune, message",
    [
        ({2: [0]}, r"no layer 2 in the encoder; it has layers 0\.\.1"),
        ({"0": [0]}, r"no layer '0'"),
        ({0: [3]}, r"layer 0 of the encoder has heads 0\.\.2; received \[3\]"),
        ({1: [0, 1]}, r"would remove every head of layer 1"),
    ],
)
def test_kept_heads_names_bad_requests(heads_to_prune, message):
    with pytest.raises(ValueError, match=message):
        kept_heads([3, 2], heads_to_prune)


def test_head_slices_are_each_heads_contiguous_features():
    np.testing.assert_array_equal(head_slices([1, 3], 3), [3, 4, 5, 9, 10, 11])


@pytest.mark.parametrize("use_bias", [True, False])
def test_pruned_values_slice_head_columns_and_output_rows(use_bias):
    """Query/key/value keep the kept heads' columns (and bias entries), the output projection
    their rows: exact, NumPy fancy indexing of the layer's own weights."""
    keras.utils.set_random_seed(0)
    attention = MultiHeadAttention(num_heads=3, key_dim=2, use_bias=use_bias)
    attention.build((None, None, 5))
    values = pruned_attention_values(attention, [0, 2])
    columns = [0, 1, 4, 5]
    for dense in (attention.query_dense, attention.key_dense, attention.value_dense):
        np.testing.assert_array_equal(values[id(dense.kernel)], to_numpy(dense.kernel)[:, columns])
        if use_bias:
            np.testing.assert_array_equal(values[id(dense.bias)], to_numpy(dense.bias)[columns])
    output = attention.output_dense.kernel
    np.testing.assert_array_equal(values[id(output)], to_numpy(output)[columns])
    assert len(values) == (7 if use_bias else 4)


def test_keeping_every_head_changes_nothing():
    attention = MultiHeadAttention(num_heads=2, key_dim=2)
    attention.build((None, None, 4))
    assert pruned_attention_values(attention, [0, 1]) == {}
