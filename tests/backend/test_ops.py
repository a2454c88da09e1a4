
import keras
import numpy as np
import pytest
from helpers import BACKEND, compile_with_xla, to_numpy

from kbert.backend import fast_paths
from kbert.backend.ops import (
    dense,
    dtype_name,
    fused_attention,
    is_eager_tensor,
    layer_normalization,
    masked_score,
    reshape,
    rms_normalization,
)


class EagernessProbe(keras.layers.Layer):
    """Records what `is_eager_tensor` says about the tensors `call` receives."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen = []

    def call(self, inputs):
        self.seen.append(is_eager_tensor(inputs))
        return inputs * 2.0


def test_eager_values_are_eager():
    assert is_eager_tensor(np.ones((2, 3)))
    assert is_eager_tensor(keras.ops.ones((2, 3)))
    assert is_eager_tensor(keras.ops.convert_to_tensor(np.arange(4)))


def test_keras_tensor_is_not_eager():
    assert not is_eager_tensor(keras.Input((3,)))


def test_layer_call_eager_vs_symbolic():
    probe = EagernessProbe()
    probe(keras.ops.ones((2, 3)))
    assert probe.seen == [True]
    probe.seen.clear()
    # A symbolic call traces `call` with the backend's placeholder tensors.
    outputs = probe(keras.Input((3,)))
    assert tuple(outputs.shape) == (None, 3)
    assert probe.seen and not any(probe.seen)


def test_not_eager_inside_xla():
    seen = []

    def fn(x):
        seen.append(is_eager_tensor(x))
        return x + 1

    outputs = compile_with_xla(fn)(keras.ops.ones((2, 3)))
    np.testing.assert_array_equal(to_numpy(outputs), np.full((2, 3), 2.0))
    assert seen == [False]


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is the PyTorch backend's compiler.")
def test_not_eager_inside_torch_compile():
    import torch

    seen = []

    def fn(x):
        seen.append(is_eager_tensor(x))
        return x + 1

    outputs = torch.compile(fn, backend="eager")(torch.ones(2, 3))
    np.testing.assert_array_equal(outputs.numpy(), np.full((2, 3), 2.0))
    assert seen and not any(seen)


def numpy_attention(query, key, value, mask, scale):
    scores = np.einsum("bqnh,bknh->bnqk", query, key) * scale
    scores = np.where(mask, scores, -1e30)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    return np.einsum("bnqk,bknh->bqnh", probabilities, value)


@pytest.mark.fast_paths_both_ways
def test_fused_attention_matches_numpy():
    """Masked softmax attention against NumPy, atol 1e-5 (float32), in Keras' head layout."""
    rng = np.random.default_rng(0)
    query, key, value = (rng.standard_normal((2, 5, 3, 4)).astype("float32") for _ in range(3))
    mask = np.ones((2, 1, 1, 5), bool)
    mask[1, ..., 3:] = False  # the second row's last two keys are padding
    context = fused_attention(query, key, value, mask, scale=0.3)
    np.testing.assert_allclose(to_numpy(context), numpy_attention(query, key, value, mask, 0.3), atol=1e-5)


def test_fused_attention_dropout_needs_the_torch_fast_path():
    x = np.ones((1, 2, 1, 4), "float32")
    with fast_paths.switched(False), pytest.raises(ValueError, match="dropout rate only on PyTorch"):
        fused_attention(x, x, x, None, scale=0.5, dropout_rate=0.1)


@pytest.mark.fast_paths_both_ways
def test_fused_attention_adds_the_bias_under_the_mask():
    """T5's relative bias with a padding mask, against NumPy, atol 1e-5."""
    rng = np.random.default_rng(1)
    query, key, value = (rng.standard_normal((2, 4, 3, 4)).astype("float32") for _ in range(3))
    bias = rng.standard_normal((1, 3, 4, 4)).astype("float32")
    mask = np.ones((2, 1, 1, 4), bool)
    mask[0, ..., 2:] = False
    context = fused_attention(query, key, value, mask, scale=1.0, bias=bias)
    scores = np.where(mask, np.einsum("bqnh,bknh->bnqk", query, key) + bias, -1e30)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    expected = np.einsum("bnqk,bknh->bqnh", probabilities, value)
    np.testing.assert_allclose(to_numpy(context), expected, atol=1e-5)


@pytest.mark.fast_paths_both_ways
def test_fused_attention_takes_heads_first_keys_and_values():
    """A cache's `(batch, heads, length, head_dim)` keys and values give the Keras-layout result (atol 1e-6)."""
    rng = np.random.default_rng(3)
    query, key, value = (rng.standard_normal((2, 5, 3, 4)).astype("float32") for _ in range(3))
    mask = np.ones((2, 1, 1, 5), bool)
    mask[0, ..., 4:] = False
    expected = to_numpy(fused_attention(query, key, value, mask, scale=0.5))
    key_first, value_first = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (key, value))
    context = fused_attention(query, key_first, value_first, mask, scale=0.5, key_value_heads_first=True)
    np.testing.assert_allclose(to_numpy(context), expected, atol=1e-6)


def test_masked_score_is_finite_in_its_dtype():
    for dtype in ("float16", "bfloat16", "float32"):
        score = float(to_numpy(keras.ops.cast(keras.ops.cast(masked_score(dtype), dtype), "float32")))
        assert np.isfinite(score) and score < -1e4 and np.isfinite(score * 1.4)


def test_dtype_name_of_tensors_and_arrays():
    assert dtype_name(keras.ops.ones((2,), "bool")) == "bool"
    assert dtype_name(keras.ops.ones((2,), "bfloat16")) == "bfloat16"
    assert dtype_name(np.ones(2, "int32")) == "int32"


@pytest.mark.fast_paths_both_ways
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_normalization_matches_numpy_in_float32(dtype):
    """Statistics in float32 whatever the input dtype; the result cast to `dtype` (atol 1e-5, bfloat16 1e-2)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 3, 8)) * 300 + 50).astype("float32")
    gamma, beta = (rng.standard_normal(8).astype("float32") for _ in range(2))
    outputs = layer_normalization(keras.ops.cast(x, dtype), keras.Variable(gamma), keras.Variable(beta), 1e-5, dtype)
    assert keras.backend.standardize_dtype(outputs.dtype) == dtype
    x = to_numpy(keras.ops.cast(keras.ops.cast(x, dtype), "float32")).astype("float64")
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * gamma + beta
    atol = 1e-5 if dtype == "float32" else 1e-2 * np.abs(expected).max()
    np.testing.assert_allclose(to_numpy(keras.ops.cast(outputs, "float32")), expected, atol=atol, rtol=0)


@pytest.mark.fast_paths_both_ways
def test_reshape_equals_numpy():
    x = np.arange(24.0, dtype="float32").reshape(2, 3, 4)
    for shape in [(2, 3, 2, 2), (6, 4), (2, -1)]:
        np.testing.assert_array_equal(to_numpy(reshape(keras.ops.convert_to_tensor(x), shape)), x.reshape(shape))


@pytest.mark.fast_paths_both_ways
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rms_normalization_matches_numpy_in_float32(dtype):
    """Statistics in float32 whatever the input dtype; the result cast to `dtype` (atol 1e-6, bfloat16 1e-2)."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 3, 8)) * 300).astype("float32")  # x² overflows float16, not float32
    scale = rng.standard_normal(8).astype("float32")
    outputs = rms_normalization(keras.ops.cast(x, dtype), keras.Variable(scale), 1e-6, dtype)
    assert keras.backend.standardize_dtype(outputs.dtype) == dtype
    x = to_numpy(keras.ops.cast(keras.ops.cast(x, dtype), "float32"))
    expected = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-6) * scale
    atol = 1e-6 if dtype == "float32" else 1e-2 * np.abs(expected).max()
    np.testing.assert_allclose(to_numpy(keras.ops.cast(outputs, "float32")), expected, atol=atol)


@pytest.mark.fast_paths_both_ways
@pytest.mark.parametrize("kernel_transposed", [False, True])
def test_dense_matches_numpy(kernel_transposed):
    """`inputs @ kernel + bias`, the kernel stored `(in, out)` or `(out, in)` (atol 1e-5)."""
    rng = np.random.default_rng(5)
    x, kernel, bias = (rng.standard_normal(shape).astype("float32") for shape in [(2, 3, 4), (4, 5), (5,)])
    stored = kernel.T.copy() if kernel_transposed else kernel
    outputs = dense(x, keras.Variable(stored), bias, kernel_transposed=kernel_transposed)
    np.testing.assert_allclose(to_numpy(outputs), x @ kernel + bias, atol=1e-5, rtol=0)
