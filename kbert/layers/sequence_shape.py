"""The shape check of a layer whose input is a sequence of vectors `(batch, sequence, width)`."""


def check_sequence_shape(layer, shape, width="hidden", argument="inputs"):
    """A `ValueError` naming `layer` unless `shape` has three axes: batch, sequence and `width`.

    >>> import keras
    >>> check_sequence_shape(keras.layers.Dense(2), (2, 8))
    Traceback (most recent call last):
    ...
    ValueError: Dense expects inputs of shape (batch, sequence, hidden); received shape (2, 8).
    """
    if len(shape) != 3:
        raise ValueError(
            f"{type(layer).__name__} expects {argument} of shape (batch, sequence, {width}); "
            f"received shape {tuple(shape)}."
        )
