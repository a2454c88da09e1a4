"""Dropout of a block's activations, with no layer call where it would change nothing."""

import keras

from kbert.backend_utils import jax_dropout, jax_dropout_prng


def apply_dropout(dropout, x, training):
    """`dropout(x, training=training)` when it drops something, else `x` itself.

    `keras.layers.Dropout` returns its input unchanged outside training or at
    rate 0, but each call still costs Keras' layer bookkeeping (about 45 µs on
    eager PyTorch); the blocks call it several times per layer and per
    decoding step. On JAX the mask's bits come from `jax_dropout_prng()`
    (Philox unless `KBERT_JAX_DROPOUT_PRNG` says otherwise; `threefry` is
    Keras' own `Dropout`), seeded by the layer's own seed generator.

    >>> x = keras.ops.ones((2, 3))
    >>> apply_dropout(keras.layers.Dropout(0.5), x, training=False) is x
    True
    """
    if not training or dropout.rate <= 0:
        return x
    if keras.backend.backend() == "jax" and dropout.noise_shape is None:
        prng = jax_dropout_prng()
        if prng != "threefry":
            return jax_dropout(x, dropout.rate, dropout.seed_generator.next(), prng)
    return dropout(x, training=training)
