"""Helpers shared by the sparse attention kernels (BigBird, Longformer)."""

from keras import ops

from kbert.backend.ops import pad

# Queries per head attended together. Longer sequences are cut into groups of
# query blocks that run one after another (`keras.ops.map`: a loop under XLA,
# a Python loop on PyTorch), so the live copies of each group's keys (and,
# where the kernel is not fused, its scores) stay this size whatever the
# length, and the layer's memory is O(n·d) besides. (Unrolled groups would not
# do: XLA's CPU scheduler interleaves them and keeps them all alive at once.)
GROUP_QUERIES = 1024
# The longest sequence whose attention probabilities a sparse layer returns on
# request: they come as one dense `(batch, heads, n, n)` map (the pattern's
# zeros included), for analysing short inputs.
DENSE_PROBABILITIES_MAX_LENGTH = 4096


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
    """Blocks `i-1`, `i`, `i+1` of the `count` blocks `i` from `start + 1` on `axis`: three tensors.

    `x` holds one block before the first `i`: the parts are its blocks
    `[start + shift, start + shift + count)`, `shift` = 0, 1, 2. The caller
    joins them (with any other keys) in one concatenation.

    >>> x = ops.reshape(ops.arange(5), (5, 1))  # five blocks of one token
    >>> [ops.convert_to_numpy(part).tolist() for part in neighbour_blocks(x, 0, 1, 2)]
    [[[1], [2]], [[2], [3]], [[3], [4]]]
    """
    x = slice_blocks(x, axis, start, count + 2)
    before = (slice(None),) * axis
    return [x[before + (slice(shift, shift + count),)] for shift in range(3)]


def attend_blocks(attend, query, key, value, mask, training):
    """A dense kernel run on many blocks of queries at once, each block with its own keys.

    Args:
        attend: `MultiHeadAttention.attend` bound to the layer: `(batch,
            length, heads, dim)` in and out, a bool mask broadcastable to
            `(batch, heads, query_length, key_length)`.
        query: `(..., q, heads, dim)`; the leading axes (batch first) index the blocks.
        key, value: heads first, `(..., heads, k, dim)`, with the same leading axes.
        mask: bool `(..., heads or 1, q or 1, k)`, with the same leading axes.
        training: whether attention dropout is active.

    Returns:
        `(..., q, heads, dim)`.

    The blocks become the batch of one fused call (PyTorch's
    `scaled_dot_product_attention`, XLA's attention): no score tensor is
    kept, and the heads-first keys (as the caller gathers them) are the
    layout PyTorch's kernel reads without a copy.

    >>> from kbert.layers import MultiHeadAttention
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> q, k = ops.ones((1, 3, 5, 2, 4)), ops.ones((1, 3, 2, 7, 4))
    >>> mask = ops.ones((1, 3, 1, 1, 7), "bool")
    >>> tuple(attend_blocks(layer.attend, q, k, k, mask, False).shape)
    (1, 3, 5, 2, 4)
    """
    leading = tuple(query.shape[1:-3])

    def fold(x):  # the leading axes into one batch axis
        return ops.reshape(x, (-1,) + tuple(x.shape[-3:]))

    key, value = (ops.transpose(fold(x), (0, 2, 1, 3)) for x in (key, value))
    context = attend(fold(query), key, value, mask=fold(mask), training=training)
    return ops.reshape(context, (-1,) + leading + tuple(context.shape[1:]))


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


def attention_with_pattern(layer, query, key, value, mask, pattern, training):
    """`(context, probabilities)`: dense attention restricted to a sparse pattern, explicitly.

    What a sparse layer returns when asked for its probabilities: the same
    result as its kernel, with the probabilities as a dense `(batch, heads, n,
    n)` map, 0 outside the pattern and on padding keys (a padding query with
    no real key in its pattern gets a row of zeros).

    Args:
        layer: the sparse `MultiHeadAttention` subclass.
        query, key, value: `(batch, n, heads, dim)`.
        mask: bool, broadcastable to `(batch, heads, n, n)`, or None.
        pattern: bool `(heads, n, n)` NumPy (the layer's `attention_pattern`)
            or a tensor broadcastable to `(batch, heads, n, n)`.
        training: whether attention dropout is active.
    """
    n = static_length(layer, query)
    if n > DENSE_PROBABILITIES_MAX_LENGTH:
        raise ValueError(
            f"{type(layer).__name__} returns its attention probabilities as a dense map for "
            f"sequences of at most {DENSE_PROBABILITIES_MAX_LENGTH} tokens; received {n}."
        )
    pattern = ops.convert_to_tensor(pattern)
    if len(pattern.shape) == 3:
        pattern = pattern[None]
    mask = pattern if mask is None else ops.logical_and(ops.cast(mask, "bool"), pattern)
    context, probabilities = layer._explicit_attention(query, key, value, mask, None, training)
    return context, ops.where(mask, probabilities, ops.zeros_like(probabilities))


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
    return pad(key_mask, ((0, 0), (0, padded_length - length)), False)
