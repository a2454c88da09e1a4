"""Attention masks: merging `padding_mask` and `attention_mask` into one boolean mask, folding a padding
mask into a score bias, and the causal masks of decoder blocks."""

from keras import ops

from kbert.backend.ops import as_bool, dtype_name, masked_score, positions_from


def merge_attention_masks(padding_mask=None, attention_mask=None):
    """Combine a key padding mask and an attention mask; `True` = may attend.

    Args:
        padding_mask: 0/1 or bool `(batch, key_length)`: 1 for real keys.
        attention_mask: 0/1 or bool `(batch, query_length, key_length)`.

    Returns:
        `None` when both are `None`, else a bool tensor broadcastable to
        `(batch, heads, query_length, key_length)`.

    >>> tuple(merge_attention_masks(ops.ones((2, 5))).shape)
    (2, 1, 1, 5)
    """
    mask = None
    if padding_mask is not None:
        if len(padding_mask.shape) != 2:
            raise ValueError(
                "padding_mask must have shape (batch, sequence); "
                f"received shape {tuple(padding_mask.shape)}."
            )
        mask = as_bool(padding_mask)[:, None, None, :]
    if attention_mask is not None:
        if len(attention_mask.shape) != 3:
            raise ValueError(
                "attention_mask must have shape (batch, query, key); "
                f"received shape {tuple(attention_mask.shape)}."
            )
        merged = as_bool(attention_mask)[:, None, :, :]
        mask = merged if mask is None else ops.logical_and(mask, merged)
    return mask


def fold_padding_mask(bias, padding_mask):
    """`bias` `(1 or batch, heads, query, key)` with the keys that `padding_mask` drops masked.

    One additive tensor `(batch, heads, query, key)` for all of a stack's
    blocks, built once (T5's position bias with its padding mask, as
    transformers builds it), where a mask beside the bias costs each block a
    pass over a tensor of that size. Masked scores get `masked_score` of the
    bias's dtype; a `padding_mask` of None leaves `bias` as it is.

    >>> bias = ops.zeros((1, 1, 1, 3))
    >>> folded = fold_padding_mask(bias, ops.convert_to_tensor([[1, 1, 0]]))
    >>> (ops.convert_to_numpy(folded)[0, 0, 0] < -1e8).tolist()
    [False, False, True]
    """
    if padding_mask is None:
        return bias
    keep = as_bool(padding_mask)[:, None, None, :]
    dtype = dtype_name(bias)
    return ops.where(keep, bias, ops.cast(masked_score(dtype), dtype))


def starts_at_zero(cache_update_index):
    """Whether a causal block's queries start at key 0: no cache (None), or a write at the Python int 0.

    Then the causal rule is top-left aligned (query `i` attends keys `j <=
    i`), which a fused kernel takes as a flag; a tensor index is a decoding
    step, whose offset only a mask carries.

    >>> starts_at_zero(None), starts_at_zero(0), starts_at_zero(3)
    (True, True, False)
    """
    return cache_update_index is None or (
        isinstance(cache_update_index, int) and cache_update_index == 0
    )


def causal_padding_mask(padding_mask, query_length=None, offset=0):
    """A causal mask over the real keys of `padding_mask` `(batch, key_length)`.

    The queries are the keys themselves (`query_length=None`, self-attention
    over whole sequences; this form also wires symbolic graphs, whose lengths
    are unknown), or `query_length` positions from `offset` (a decoding step
    against a cache of `key_length` positions). Each query also attends its
    own position, padding or not, so that no row of a left-padded batch is
    masked entirely (a fused kernel would turn such a row into NaNs, which
    then leak into the next layer through zero weights); the outputs at
    padded positions are meaningless and unused.

    Returns a bool tensor `(batch, query_length, key_length)`.

    >>> mask = causal_padding_mask(ops.convert_to_tensor([[0, 1, 1]]))
    >>> ops.convert_to_numpy(mask).astype(int).tolist()
    [[[1, 0, 0], [0, 1, 0], [0, 1, 1]]]
    """
    key_length = padding_mask.shape[1]
    if query_length is None or key_length is None:
        ones = ops.ones_like(padding_mask, dtype="int32")  # a length known only when run
        key_positions = ops.cumsum(ones, axis=1) - ones  # not `- 1`: see `kbert.models.gpt2.position_ids`
    else:
        key_positions = ops.arange(key_length, dtype="int32")[None, :]
    if query_length is None:
        query_positions = key_positions
    else:
        query_positions = positions_from(query_length, offset)[None, :]
    causal = key_positions[:, None, :] <= query_positions[:, :, None]
    own = ops.equal(key_positions[:, None, :], query_positions[:, :, None])
    real = ops.cast(padding_mask, "bool")[:, None, :]
    return ops.logical_and(causal, ops.logical_or(real, own))
