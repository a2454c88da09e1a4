import keras
import numpy as np
import pytest
from helpers import compile_with_xla, padding_mask, to_numpy

from kbert.backend.ops import masked_score
from kbert.layers import merge_attention_masks
from kbert.layers.attention_mask import fold_padding_mask

BATCH, Q, K = 2, 5, 6


def test_no_masks_give_none():
    assert merge_attention_masks() is None
    assert merge_attention_masks(None, None) is None


@pytest.mark.parametrize("dtype", ["int32", "float32", "bool"])
def test_padding_mask_broadcasts_over_heads_and_queries(dtype):
    mask = padding_mask([K, 3], K).astype(dtype)
    merged = merge_attention_masks(mask)
    assert tuple(merged.shape) == (BATCH, 1, 1, K)
    assert keras.backend.standardize_dtype(merged.dtype) == "bool"
    np.testing.assert_array_equal(to_numpy(merged)[:, 0, 0], mask.astype(bool))


def test_attention_mask_alone():
    attention = (np.random.default_rng(0).random((BATCH, Q, K)) < 0.5).astype("int32")
    merged = to_numpy(merge_attention_masks(attention_mask=attention))
    assert merged.shape == (BATCH, 1, Q, K)
    np.testing.assert_array_equal(merged[:, 0], attention.astype(bool))


def test_both_masks_are_and_combined():
    padding = padding_mask([K, 3], K)
    attention = (np.random.default_rng(1).random((BATCH, Q, K)) < 0.7).astype("int32")
    merged = to_numpy(merge_attention_masks(padding, attention))
    expected = padding.astype(bool)[:, None, :] & attention.astype(bool)
    assert merged.shape == (BATCH, 1, Q, K)
    np.testing.assert_array_equal(merged[:, 0], expected)


def test_merge_under_xla():
    padding = padding_mask([K, 3], K)
    attention = np.tril(np.ones((BATCH, Q, K), "int32"))
    compiled = compile_with_xla(lambda p, a: merge_attention_masks(p, a))
    merged = to_numpy(compiled(padding, attention))
    np.testing.assert_array_equal(merged, to_numpy(merge_attention_masks(padding, attention)))


def test_padding_mask_of_wrong_rank_raises():
    with pytest.raises(
        ValueError, match=r"padding_mask must have shape \(batch, sequence\); received shape \(2, 5, 6\)"
    ):
        merge_attention_masks(np.ones((BATCH, Q, K), "int32"))


def test_attention_mask_of_wrong_rank_raises():
    with pytest.raises(
        ValueError, match=r"attention_mask must have shape \(batch, query, key\); received shape \(2, 6\)"
    ):
        merge_attention_masks(attention_mask=np.ones((BATCH, K), "int32"))


def test_fold_padding_mask_against_numpy():
    """One `(batch, heads, query, key)` bias: the position bias where a key is real, the masked score at padding."""
    rng = np.random.default_rng(5)
    bias = rng.standard_normal((1, 2, 3, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], "int32")
    expected = np.where(mask[:, None, None, :] == 1, bias, np.float32(masked_score("float32")))
    folded = to_numpy(fold_padding_mask(keras.ops.convert_to_tensor(bias), keras.ops.convert_to_tensor(mask)))
    assert folded.shape == (2, 2, 3, 4)
    np.testing.assert_array_equal(folded, expected)
    assert fold_padding_mask(bias, None) is bias
