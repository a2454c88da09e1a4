"""`DirectCall`: which calls skip Keras' `Layer.__call__`, and that the result is the same."""

import keras
import numpy as np
import pytest
from helpers import BACKEND, to_numpy

from kbert.backend import fast_paths
from kbert.layers import FusedDense, MultiHeadAttention
from kbert.layers.direct_call import DirectCall


@pytest.fixture
def keras_calls(monkeypatch):
    """The layers whose calls go through Keras' `Layer.__call__`, in order."""
    seen = []
    keras_call = keras.layers.Layer.__call__

    def counted(layer, *args, **kwargs):
        seen.append(type(layer).__name__)
        return keras_call(layer, *args, **kwargs)

    monkeypatch.setattr(keras.layers.Layer, "__call__", counted)
    return seen


def built_dense(**kwargs):
    layer = FusedDense(3, **kwargs)
    layer.build((None, 4))
    return layer


def inputs(dtype="float32"):
    return keras.ops.convert_to_tensor(np.arange(8.0).reshape(2, 4), dtype=dtype)


@pytest.mark.fast_paths_both_ways
def test_direct_call_equals_keras_call(keras_calls):
    """Same outputs either way (exactly: the same `call` runs); only PyTorch's fast path skips Keras."""
    layer = built_dense()
    direct = to_numpy(layer(inputs()))
    through_keras = to_numpy(keras.layers.Layer.__call__(layer, inputs()))
    np.testing.assert_array_equal(direct, through_keras)
    assert keras_calls == (["FusedDense"] if fast_paths.active() else ["FusedDense", "FusedDense"])


@pytest.mark.skipif(BACKEND != "torch", reason="only eager PyTorch calls directly")
def test_unbuilt_numpy_and_symbolic_calls_go_through_keras(keras_calls):
    layer = FusedDense(3)
    layer(inputs())  # builds it
    layer(np.ones((2, 4), "float32"))  # needs converting
    model_input = keras.Input((4,))
    layer(model_input)  # symbolic
    assert keras_calls == ["FusedDense"] * 3


@pytest.mark.skipif(BACKEND != "torch", reason="only eager PyTorch calls directly")
def test_keras_keeps_what_it_would_change(keras_calls):
    """A mixed policy (autocast), a quantized layer, a float input of another dtype: through Keras."""
    mixed = built_dense(dtype="mixed_bfloat16")
    assert keras.backend.standardize_dtype(mixed(inputs("bfloat16")).dtype) == "bfloat16"
    quantized = built_dense()
    quantized.quantize("int8", type_check=False)
    quantized(inputs())
    built_dense()(inputs("float64"))
    assert keras_calls == ["FusedDense"] * 3


@pytest.mark.skipif(BACKEND != "torch", reason="only eager PyTorch calls directly")
def test_a_policy_changed_after_a_direct_call_goes_through_keras(keras_calls):
    """The policy facts are cached per layer: quantizing or a new policy must be seen."""
    quantized, mixed = built_dense(), built_dense()
    quantized(inputs()), mixed(inputs())  # direct: the facts are cached
    assert keras_calls == []
    quantized.quantize("int8", type_check=False)
    quantized(inputs())
    mixed.dtype_policy = "mixed_bfloat16"
    assert keras.backend.standardize_dtype(mixed(inputs()).dtype) == "bfloat16"
    assert keras_calls == ["FusedDense"] * 2


@pytest.mark.skipif(BACKEND != "torch", reason="only eager PyTorch calls directly")
def test_training_must_be_explicit_where_call_takes_it(keras_calls):
    """Keras would read an omitted `training` from the outer call; a layer without one drops it."""
    attention = MultiHeadAttention(num_heads=2, key_dim=2)
    x = keras.ops.ones((1, 3, 4))
    attention(x)  # builds it
    attention(x)  # no training: through Keras
    attention(x, training=False)  # direct
    layer = built_dense()
    layer(inputs(), training=True)  # FusedDense.call takes no training: dropped, direct
    assert keras_calls.count("MultiHeadAttention") == 2
    assert "FusedDense" not in keras_calls[keras_calls.index("MultiHeadAttention") + 2:]


def test_mixin_goes_first():
    assert FusedDense.__mro__.index(DirectCall) < FusedDense.__mro__.index(keras.layers.Dense)
