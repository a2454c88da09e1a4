import keras
import numpy as np
import pytest
from helpers import np_gelu, np_gelu_tanh, to_numpy, xla_call

from kbert.layers import gelu_approximate, get_activation
from kbert.layers.activations import activation_name, serialize_activation

X = np.linspace(-6.0, 6.0, 241).astype("float32")


def test_gelu_is_the_exact_erf_form():
    outputs = to_numpy(get_activation("gelu")(keras.ops.convert_to_tensor(X)))
    np.testing.assert_allclose(outputs, np_gelu(X), atol=1e-6, rtol=0)
    # And differs measurably from the tanh form, so the check above can tell them apart.
    assert np.abs(np_gelu(X) - np_gelu_tanh(X)).max() > 1e-4


@pytest.mark.parametrize("name", ["gelu_approximate", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"])
def test_tanh_gelu_names(name):
    fn = get_activation(name)
    assert fn is gelu_approximate
    np.testing.assert_allclose(to_numpy(fn(keras.ops.convert_to_tensor(X))), np_gelu_tanh(X), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "alias, name", [("gelu_new", "gelu_approximate"), ("gelu_python", "gelu"), ("swish", "silu")]
)
def test_aliases_resolve_to_kbert_names(alias, name):
    assert activation_name(alias) == name
    assert activation_name(name) == name
    np.testing.assert_allclose(
        to_numpy(get_activation(alias)(X)), to_numpy(get_activation(name)(X)), atol=0
    )


def test_gelu_approximate_under_bfloat16_input():
    outputs = gelu_approximate(keras.ops.convert_to_tensor(X, "bfloat16"))
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    actual = to_numpy(keras.ops.cast(outputs, "float32"))
    np.testing.assert_allclose(actual, np_gelu_tanh(X), atol=0.05, rtol=0.02)


def test_keras_names_pass_through():
    np.testing.assert_allclose(to_numpy(get_activation("relu")(X)), np.maximum(X, 0), atol=0)
    np.testing.assert_allclose(to_numpy(get_activation("tanh")(X)), np.tanh(X), atol=1e-6)


def test_none_and_callables_are_returned_unchanged():
    assert get_activation(None) is None

    def custom(x):
        return x

    assert get_activation(custom) is custom


def test_unknown_name_raises_clearly():
    with pytest.raises(ValueError, match=r"Unknown activation 'swishy'.*'gelu_approximate' \(tanh GELU\)"):
        get_activation("swishy")


def test_serialization_round_trip():
    assert serialize_activation("gelu") == "gelu"
    assert serialize_activation(None) is None
    config = serialize_activation(gelu_approximate)
    assert isinstance(config, dict)
    assert serialize_activation(config) is config
    assert get_activation(config) is gelu_approximate
    assert keras.saving.get_registered_object("kbert>gelu_approximate") is gelu_approximate


def test_dense_with_gelu_approximate_compiles_and_matches():
    layer = keras.layers.Dense(4, activation=gelu_approximate)
    x = X.reshape(-1, 1)[:40]
    eager = to_numpy(layer(x))
    kernel, bias = to_numpy(layer.kernel), to_numpy(layer.bias)
    np.testing.assert_allclose(eager, np_gelu_tanh(x @ kernel + bias), atol=1e-5, rtol=0)
    np.testing.assert_allclose(xla_call(layer, x), eager, atol=1e-5, rtol=0)
