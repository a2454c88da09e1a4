"""Helpers shared by the sparse attention kernels (BigBird, Longformer)."""

from keras import ops

from kbert.layers.attention_mask import MASKED_SCORE

# Queries per head whose scores are computed together. Longer sequences are
# cut into groups of query blocks that run one after another
# (`keras.ops.map`: a loop under XLA, a Python loop on PyTorch), so the live
# score tensors stay this size whatever the length and the layer's memory is
# O(n·d) besides. (Unrolled groups would not do: XLA's CPU scheduler
# interleaves them and keeps all their scores alive at once.)
GROUP_QUERIES = 1024


def group_blocks(num_blocks, block_queries):
    """`(group, groups)`: query blocks per group and the number of groups.

    `group * groups` may exceed `num_blocks`; the caller pads the blocks.
    """
    group = min(num_blocks, max(1, GROUP_QUERIES // block_queries))
    return group, -(-num_blocks // group)


def slice_blocks(x, axis, start, count):
    """Blocks `[start, start + count)` of `axis` (`start` may be a traced scalar)."""
    size = list(x.shape)
    if size[0] is None:  # a symbolic batch
        size[0] = ops.shape(x)[0]
    size[axis] = count
    return ops.slice(x, [0] * axis + [start] + [0] * (len(size) - axis - 1), size)


def neighbour_blocks(x, axis, start, count):
    """Blocks `i-1, i, i+1` side by side for the `count` blocks `i` from `start + 1` on `axis`.

    `x` holds one block before the first `i`: the result joins its blocks
    `[start + shift, start + shift + count)`, `shift` = 0, 1, 2, on `axis + 1`.

    >>> x = ops.reshape(ops.arange(5), (5, 1))  # five blocks of one token
    >>> ops.convert_to_numpy(neighbour_blocks(x, 0, 1, 2)).tolist()
    [[1, 2, 3], [2, 3, 4]]
    """
    x = slice_blocks(x, axis, start, count + 2)
    before = (slice(None),) * axis
    parts = [x[before + (slice(shift, shift + count),)] for shift in range(3)]
    return ops.concatenate(parts, axis=axis + 1)


def map_groups(layer, group_fn, groups, group, training, axis):
    """`group_fn(start)` for each group's first block `start`, joined on the blocks `axis`.

    One group runs directly. Attention dropout draws from a seed generator,
    which cannot advance inside a compiled loop, so with active dropout the
    groups are unrolled (training keeps every group's probabilities for the
    backward pass anyway).
    """
    if groups == 1:
        return group_fn(0)
    if training and layer.dropout > 0:
        return ops.concatenate([group_fn(g * group) for g in range(groups)], axis=axis)
    stacked = ops.map(group_fn, ops.arange(groups, dtype="int32") * group)
    stacked = ops.moveaxis(stacked, 0, axis)  # (..., groups, group, ...)
    shape = list(stacked.shape)
    return ops.reshape(stacked, [-1] + shape[1:axis] + [groups * group] + shape[axis + 2 :])


def check_self_attention(layer, query, value, key, attention_mask, **masks):
    """Reject what a sparse self-attention layer cannot take, naming the layer.

    `masks` (`padding_mask=`, ...) are 0/1 `(batch, sequence)` masks, each as
    long as `query`, or None.
    """
    name = type(layer).__name__
    for mask_name, mask in masks.items():
        length = query.shape[1]
        if mask is not None and (
            len(mask.shape) != 2 or None not in (length, mask.shape[1]) and mask.shape[1] != length
        ):
            raise ValueError(
                f"{name}: {mask_name} must have shape (batch, sequence) with the query's "
                f"sequence length {length}; received shape {tuple(mask.shape)}."
            )
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
    """One float32 softmax over several score pieces, as if they were concatenated on the last axis.

    The pieces are never concatenated: the row maximum and the normalizer are
    reduced piece by piece, so the only score-sized tensors are the pieces'
    own exponentials (what XLA can fuse into one pass per piece).

    Args:
        pieces: list of `(scores, mask)`: scores of any float dtype, bool masks
            broadcastable to them (False = masked). All pieces share the
            shape of their leading axes.

    Returns:
        The probabilities of each piece, in `compute_dtype`, after dropout.
    """
    masked = [ops.where(mask, ops.cast(scores, "float32"), MASKED_SCORE) for scores, mask in pieces]
    maximum = ops.max(masked[0], axis=-1, keepdims=True)
    for scores in masked[1:]:
        maximum = ops.maximum(maximum, ops.max(scores, axis=-1, keepdims=True))
    exponentials = [ops.exp(scores - maximum) for scores in masked]
    total = ops.sum(exponentials[0], axis=-1, keepdims=True)
    for exponential in exponentials[1:]:
        total = total + ops.sum(exponential, axis=-1, keepdims=True)
    return [
        dropout_layer(ops.cast(exponential / total, compute_dtype), training=training)
        for exponential in exponentials
    ]
