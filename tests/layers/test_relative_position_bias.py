import math

import keras
import numpy as np
import pytest
from helpers import STANDARD_CHECKS, LayerCase, random_floats, run_standard_check, to_numpy, xla_call

from kbert.layers import RelativePositionBias

HEADS = 3


def np_bucket(r, num_buckets=32, max_distance=128, bidirectional=True):
    """docs/algorithms.md §8, one relative position `r = key − query` at a time."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        if r > 0:
            offset = num_buckets
        n = abs(r)
    else:
        n = max(-r, 0)
    m = num_buckets // 2
    if n < m:
        return offset + n
    large = m + math.floor(math.log(n / m) / math.log(max_distance / m) * (num_buckets - m))
    return offset + min(num_buckets - 1, large)


def np_bias(table, query_length, key_length, offset=0, **bucket_args):
    buckets = np.array(
        [[np_bucket(k - (q + offset), **bucket_args) for k in range(key_length)] for q in range(query_length)]
    )
    return table[buckets].transpose(2, 0, 1)[None]


def case():
    rng = np.random.default_rng(0)
    return LayerCase(
        make_layer=lambda: RelativePositionBias(HEADS),
        inputs={"query": random_floats(rng, (1, 6, 4)), "key": random_floats(rng, (1, 9, 4))},
        expected_shape=(1, HEADS, 6, 9),
    )


# The bias has no batch axis (it is (1, heads, q, k) whatever the batch), so the
# harness's symbolic check, which expects a free batch axis, is replaced below.
# The decoder (unidirectional) case shares the code path; its buckets and values
# are checked against NumPy below.
@pytest.mark.parametrize("check", [c for c in STANDARD_CHECKS if c != "symbolic_and_eager"])
def test_standard(check, tmp_path):
    run_standard_check(check, case(), tmp_path)


def test_symbolic_and_eager():
    layer = RelativePositionBias(HEADS)
    symbolic = layer(keras.Input((None, 4)), keras.Input((None, 4)))
    assert tuple(symbolic.shape) == (1, HEADS, None, None)
    outputs = layer(np.zeros((5, 7, 4), "float32"))
    assert tuple(outputs.shape) == (1, HEADS, 7, 7)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_match_numpy_over_long_distances(bidirectional):
    layer = RelativePositionBias(HEADS, bidirectional=bidirectional)
    relative = np.arange(-300, 301)
    buckets = to_numpy(layer.bucket(relative))
    expected = [np_bucket(int(r), bidirectional=bidirectional) for r in relative]
    np.testing.assert_array_equal(buckets, expected)
    assert buckets.min() == 0 and buckets.max() == 31
    if not bidirectional:
        assert np.all(buckets[relative >= 0] == 0)  # the future shares bucket 0 (masked anyway)


def test_known_buckets():
    layer = RelativePositionBias(HEADS)
    # 8 exact distances per side, then log buckets; the right side is offset by 16.
    assert to_numpy(layer.bucket(np.array([0, -1, -7, -8, -127, -128, 1, 7, 200]))).tolist() == [
        0, 1, 7, 8, 15, 15, 17, 23, 31
    ]


@pytest.mark.parametrize("bidirectional", [True, False])
def test_values_match_numpy(bidirectional):
    layer = RelativePositionBias(HEADS, num_buckets=8, max_distance=20, bidirectional=bidirectional)
    query, key = np.zeros((2, 30, 4), "float32"), np.zeros((2, 33, 4), "float32")
    outputs = to_numpy(layer(query, key))
    table = to_numpy(layer.embeddings)
    expected = np_bias(table, 30, 33, num_buckets=8, max_distance=20, bidirectional=bidirectional)
    np.testing.assert_allclose(outputs, expected, atol=1e-7)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="memory layout is PyTorch's")
def test_bias_is_laid_out_as_returned():
    """A strided bias would be copied by the fused attention kernel in every layer."""
    layer = RelativePositionBias(HEADS)
    assert layer(np.zeros((1, 6, 4), "float32")).is_contiguous()


def test_query_offset_gives_the_rows_of_a_longer_query():
    layer = RelativePositionBias(HEADS, bidirectional=False)
    full = to_numpy(layer(np.zeros((1, 10, 2), "float32")))
    step = to_numpy(layer(np.zeros((1, 1, 2), "float32"), np.zeros((1, 10, 2), "float32"), query_offset=6))
    np.testing.assert_array_equal(step[:, :, 0], full[:, :, 6])
    offset = keras.ops.convert_to_tensor(6, "int32")
    compiled = xla_call(layer, np.zeros((1, 1, 2), "float32"), np.zeros((1, 10, 2), "float32"), query_offset=offset)
    np.testing.assert_array_equal(compiled, step)


def test_rejects_too_few_buckets():
    with pytest.raises(ValueError, match="no logarithmic buckets"):
        RelativePositionBias(2, num_buckets=2)
