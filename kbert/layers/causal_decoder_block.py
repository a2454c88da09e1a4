import keras
from keras import ops

from kbert.backend.ops import causal_mask
from kbert.layers.attention_mask import starts_at_zero
from kbert.layers.cached_multi_head_attention import CachedMultiHeadAttention
from kbert.layers.encoder_block import EncoderBlock
from kbert.layers.initializers import clone_initializer


@keras.saving.register_keras_serializable(package="kbert")
class CausalDecoderBlock(EncoderBlock):
    """A decoder-only block (GPT-2's): causal, cached self-attention, then a feed-forward network.

    `EncoderBlock`, pre-LN by default (`x + Drop(Attn(LN(x)))`, then
    `x + Drop(FFN(LN(x)))`), whose default attention layer is a
    `CachedMultiHeadAttention` (its output projection initialised with
    `output_kernel_initializer`, as the feed-forward one) and whose
    self-attention is causal: without an `attention_mask`, each position
    attends to itself and the positions before it.

    Args:
        normalize_first: pre-LN (the default, GPT-2) or post-LN.
        **kwargs: those of `EncoderBlock`.

    Call arguments:
        inputs: `(batch, length, hidden)`.
        padding_mask: 0/1 `(batch, key_length)`.
        attention_mask: 0/1 or bool `(batch, length, key_length)`, the mask to
            use instead of the causal one (GPT-2 passes its causal mask over
            the real keys, `causal_padding_mask`). With neither mask (and
            no cache, or a cache written from index 0) the attention gets
            the causal rule as a flag, no mask tensor (`causal=True`).
        cache, cache_update_index: a key/value cache
            `(batch, heads, 2, max_length, key_dim)` for incremental decoding,
            written at `cache_update_index` (see `CachedMultiHeadAttention`);
            the call then returns `(outputs, updated cache)` and the masks
            cover the cache's `max_length` positions.
        training, return_attention_probabilities, head_mask: as in `EncoderBlock`.

    Example:
    >>> block = CausalDecoderBlock(num_heads=2, intermediate_dim=32)
    >>> tuple(block(keras.ops.ones((2, 6, 16))).shape)
    (2, 6, 16)
    """

    def __init__(self, num_heads, intermediate_dim, normalize_first=True, **kwargs):
        super().__init__(num_heads, intermediate_dim, normalize_first=normalize_first, **kwargs)

    def _default_attention_layer(self, key_dim):
        return super()._default_attention_layer(
            key_dim,
            CachedMultiHeadAttention,
            output_kernel_initializer=clone_initializer(self.output_kernel_initializer),
        )

    def call(self, inputs, padding_mask=None, attention_mask=None, cache=None,
             cache_update_index=None, training=None,
             return_attention_probabilities=False, head_mask=None):
        if (cache is None) != (cache_update_index is None):
            raise ValueError("Pass cache and cache_update_index together (or neither).")
        caching = {}
        if cache is not None:
            caching = dict(cache=cache, cache_update_index=cache_update_index)
        if attention_mask is None and padding_mask is None and starts_at_zero(cache_update_index):
            caching["causal"] = True  # a flag to the kernel, no mask tensor
        elif attention_mask is None:
            query_length = ops.shape(inputs)[1]
            key_length = query_length if cache is None else ops.shape(cache)[3]
            attention_mask = causal_mask(
                query_length, key_length, 0 if cache is None else cache_update_index
            )
        x, second = self._forward(
            inputs, padding_mask, attention_mask, training, return_attention_probabilities,
            head_mask, **caching,
        )
        return (x, second) if return_attention_probabilities or cache is not None else x

    def compute_output_spec(self, inputs, *args, cache=None, **kwargs):
        if cache is None:
            return super().compute_output_spec(inputs, *args, **kwargs)
        return (keras.KerasTensor(inputs.shape, self.compute_dtype),
                keras.KerasTensor(cache.shape, cache.dtype))
