"""Initializer helpers."""

import keras


def clone_initializer(initializer):
    """A fresh initializer with the same configuration.

    Keras initializers with a seed repeat their draws when shared, so each
    weight gets its own copy. (Cloning through `get_config` rather than
    `keras.initializers.serialize` keeps TensorFlow unimported on other
    backends.)

    >>> init = keras.initializers.TruncatedNormal(stddev=0.02)
    >>> clone_initializer(init).stddev
    0.02
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())
