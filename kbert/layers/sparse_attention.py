"""Helpers shared by the sparse attention kernels (BigBird, Longformer)."""

import numpy as np
from keras import ops

# Stand-in for -inf on masked scores. The scores are float32 when it is
# applied (softmax runs in float32 under every dtype policy, float16 included),
# so it never overflows.
MASKED_SCORE = -1e9


def check_self_attention(layer, value, key, attention_mask):
    """Reject what a sparse self-attention layer cannot take, naming the layer."""
    name = type(layer).__name__
    if value is not None or key is not None:
        raise ValueError(f"{name} is self-attention only: do not pass `value` or `key`.")
    if attention_mask is not None:
        raise ValueError(
            f"{name} takes a `padding_mask` (batch, sequence) only; a full "
            "`attention_mask` (batch, query, key) would defeat the sparse pattern."
        )


def static_length(layer, x):
    """The static sequence length of `x` (axis 1), or a `ValueError`."""
    length = x.shape[1]
    if length is None:
        raise ValueError(
            f"{type(layer).__name__} needs a static sequence length (its sparse "
            "pattern is planned per length); received an input of unknown length."
        )
    return int(length)


def padded_key_mask(x, mask, length, padded_length):
    """Bool `(batch, padded_length)`: True for real keys, False for padding and added positions.

    Args:
        x: a `(batch, length, ...)` tensor (gives the batch size when `mask` is None).
        mask: `None`, or a 0/1 or bool mask with `length` keys, e.g. the
            `(batch, 1, 1, length)` mask `MultiHeadAttention` hands its kernel.
    """
    if mask is None:
        while len(x.shape) > 2:
            x = x[..., 0]
        key_mask = ops.ones_like(x, dtype="bool")
    else:
        key_mask = ops.reshape(ops.cast(mask, "bool"), (-1, length))
    if padded_length == length:
        return key_mask
    return ops.pad(key_mask, ((0, 0), (0, padded_length - length)), constant_values=False)


def softmax_pieces(pieces, compute_dtype, dropout_layer, training):
    """One float32 softmax over score pieces concatenated on the last axis.

    Args:
        pieces: list of `(scores, mask)`: scores of any float dtype, bool masks
            broadcastable to them (False = masked).

    Returns:
        The probabilities, in `compute_dtype`, after dropout, split back into
        pieces of the input widths.
    """
    masked = [ops.where(mask, ops.cast(scores, "float32"), MASKED_SCORE) for scores, mask in pieces]
    widths = [x.shape[-1] for x in masked]
    joined = masked[0] if len(masked) == 1 else ops.concatenate(masked, axis=-1)
    if len(joined.shape) > 4:  # TensorFlow's softmax takes at most 5 dimensions
        shape = ops.shape(joined)
        probabilities = ops.reshape(ops.softmax(ops.reshape(joined, (-1, sum(widths)))), shape)
    else:
        probabilities = ops.softmax(joined, axis=-1)
    probabilities = ops.cast(probabilities, compute_dtype)
    probabilities = dropout_layer(probabilities, training=training)
    edges = np.cumsum([0] + widths).tolist()
    return [probabilities[..., start:end] for start, end in zip(edges[:-1], edges[1:])]
