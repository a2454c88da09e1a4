"""Dropout of a block's activations, with no layer call where it would change nothing."""


def apply_dropout(dropout, x, training):
    """`dropout(x, training=training)` when it drops something, else `x` itself.

    `keras.layers.Dropout` returns its input unchanged outside training or at
    rate 0, but each call still costs Keras' layer bookkeeping (about 45 µs on
    eager PyTorch); the blocks call it several times per layer and per
    decoding step.

    >>> import keras
    >>> x = keras.ops.ones((2, 3))
    >>> apply_dropout(keras.layers.Dropout(0.5), x, training=False) is x
    True
    """
    if training and dropout.rate > 0:
        return dropout(x, training=training)
    return x
