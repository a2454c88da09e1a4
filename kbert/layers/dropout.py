"""Dropout of a block's activations: a layer that skips Keras' call bookkeeping on PyTorch and draws
cheaper random bits on JAX, and `apply_dropout`, which makes no layer call where it would change nothing."""

import keras

from kbert.backend.ops import DROPOUT_PRNGS, dropout
from kbert.layers.direct_call import DirectCall


@keras.saving.register_keras_serializable(package="kbert")
class Dropout(DirectCall, keras.layers.Dropout):
    """`keras.layers.Dropout` that, built, calls `call` directly on eager PyTorch (`DirectCall`), and
    on JAX draws its mask with the generator `dropout_prng` names (`kbert.backend.ops.dropout`).

    Beside the time it saves, the direct call keeps `torch.compile` in one
    graph: through Keras' `Layer.__call__`, dynamo breaks the graph at the
    `inspect.Signature.bind` of its call spec ("mapping proxy affected by
    dictionary mutation") whenever a block calls its dropout with
    `training=True`, inside a model's compiled training step. On JAX the
    mask's bits come from `rbg` on a GPU or TPU and threefry (Keras' own) on
    the CPU unless `KBERT_JAX_DROPOUT_PRNG` (the process default) or the
    layer's `dropout_prng` says otherwise, seeded by the layer's own seed
    generator, which advances as Keras' does (docs/algorithms.md §24).

    Args:
        rate, noise_shape, seed: as `keras.layers.Dropout`'s.
        dropout_prng: the JAX generator of the mask, one of `DROPOUT_PRNGS`
            ("threefry", "philox4x32", "rbg", "unsafe_rbg"), kept in the
            config; None: the process default. Recorded but without effect
            on TensorFlow and PyTorch.

    >>> layer = Dropout(0.5)
    >>> x = keras.ops.ones((2, 3))
    >>> keras.ops.convert_to_numpy(layer(x, training=False)).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def __init__(self, rate, noise_shape=None, seed=None, dropout_prng=None, **kwargs):
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)
        self.dropout_prng = checked_dropout_prng(dropout_prng)

    def call(self, inputs, training=False):
        if training and self.rate > 0 and self.noise_shape is None:
            return dropout(inputs, self.rate, self.seed_generator, self.dropout_prng)
        return super().call(inputs, training=training)

    def get_config(self):
        return {**super().get_config(), "dropout_prng": self.dropout_prng}


def checked_dropout_prng(dropout_prng):
    """`dropout_prng` if it is None (the process default) or one of `DROPOUT_PRNGS`.

    >>> checked_dropout_prng("rbg"), checked_dropout_prng(None)
    ('rbg', None)
    """
    if dropout_prng is not None and dropout_prng not in DROPOUT_PRNGS:
        raise ValueError(f"dropout_prng must be None or one of {DROPOUT_PRNGS}; received {dropout_prng!r}.")
    return dropout_prng


def apply_dropout(dropout, x, training):
    """`dropout(x, training=training)` when it drops something, else `x` itself.

    `keras.layers.Dropout` returns its input unchanged outside training or at
    rate 0, but each call still costs Keras' layer bookkeeping (about 45 µs on
    eager PyTorch); the blocks call it several times per layer and per
    decoding step.

    >>> x = keras.ops.ones((2, 3))
    >>> apply_dropout(Dropout(0.5), x, training=False) is x
    True
    """
    if not training or dropout.rate <= 0:
        return x
    return dropout(x, training=training)
