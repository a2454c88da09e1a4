"""Activation names used by the BERT family, resolved to Keras functions.

`"gelu"` is the exact erf form (Hugging Face `"gelu"`, BERT in PyTorch);
`"gelu_approximate"` is the tanh form (Google's TF BERT, ALBERT v2, BigBird,
T5 v1.1: Hugging Face `"gelu_new"`). Note that `keras.ops.gelu` defaults to the
tanh form while `keras.activations.gelu` defaults to the exact one.
"""

import keras


@keras.saving.register_keras_serializable(package="kbert")
def gelu_approximate(x):
    """GELU with the tanh approximation.

    >>> float(gelu_approximate(keras.ops.ones(()) ))  # doctest: +ELLIPSIS
    0.841...
    """
    return keras.activations.gelu(x, approximate=True)


# Other names of the same functions (Hugging Face's among them).
_ALIASES = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "gelu_python": "gelu",
    "swish": "silu",
}


def activation_name(identifier):
    """The kbert name of an activation name, aliases resolved.

    >>> activation_name("gelu_pytorch_tanh"), activation_name("swish"), activation_name("relu")
    ('gelu_approximate', 'silu', 'relu')
    """
    return _ALIASES.get(identifier, identifier)


def get_activation(identifier):
    """Return the activation function for a name, a callable, or `None`.

    >>> get_activation("gelu_new") is gelu_approximate
    True
    """
    if identifier is None or callable(identifier):
        return identifier
    if isinstance(identifier, dict):
        return keras.saving.deserialize_keras_object(identifier)
    name = activation_name(identifier)
    if name == "gelu_approximate":
        return gelu_approximate
    try:
        return keras.activations.get(name)
    except ValueError:
        raise ValueError(
            f"Unknown activation '{identifier}'. Use a Keras activation name "
            "('gelu', 'relu', 'tanh', ...), 'gelu_approximate' (tanh GELU), "
            "or a callable."
        ) from None


def serialize_activation(identifier):
    """The config form of an activation: names stay names, callables are serialized.

    >>> serialize_activation("gelu")
    'gelu'
    """
    if identifier is None or isinstance(identifier, (str, dict)):
        return identifier
    return keras.saving.serialize_keras_object(identifier)
