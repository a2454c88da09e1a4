"""Merging of `padding_mask` and `attention_mask` into one boolean mask, and the masked score."""

from keras import ops

# Stand-in for -inf on masked attention scores and logits. kbert applies it to
# float32 values only (softmax runs in float32 under every dtype policy,
# float16 included), so it never overflows; `exp` of it underflows to 0.
MASKED_SCORE = -1e9


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
        mask = ops.cast(padding_mask, "bool")[:, None, None, :]
    if attention_mask is not None:
        if len(attention_mask.shape) != 3:
            raise ValueError(
                "attention_mask must have shape (batch, query, key); "
                f"received shape {tuple(attention_mask.shape)}."
            )
        merged = ops.cast(attention_mask, "bool")[:, None, :, :]
        mask = merged if mask is None else ops.logical_and(mask, merged)
    return mask
