import keras
from keras import ops

from kbert.arguments import positive_int
from kbert.backend.ops import causal_mask
from kbert.layers.attention_mask import starts_at_zero
from kbert.layers.multi_head_attention import probabilities_spec
from kbert.layers.t5_block import T5Block


@keras.saving.register_keras_serializable(package="kbert")
class CrossAttentionDecoderBlock(T5Block):
    """The decoder block of T5 and BART: causal self-attention, cross-attention, feed-forward.

    `T5Block` (pre-norm with RMS normalization, no biases, unscaled
    scores, T5's initialisation; docs/algorithms.md §8) with the self-attention
    made causal and, between it and the feed-forward network,
    `x = x + Drop(CrossAttn(RMS(x), encoder_outputs))`. The relative position
    bias goes to self-attention only; cross-attention gets none. With
    `T5Block`'s switches it is BART's post-LayerNorm decoder block.

    Incremental decoding: pass `self_attention_cache`
    `(batch, heads, 2, max_length, key_dim)` and `cache_update_index`; the
    step's keys and values are written at that index and the call returns
    `(outputs, self_attention_cache)`. `cross_attention_cache` (from
    `cross_attention.compute_cache(encoder_outputs)`) saves re-projecting the
    encoder output every step.

    Args:
        use_cross_attention: attend to `encoder_outputs` (without it, a
            decoder-only block).
        cross_attention_num_heads: the cross-attention's heads (of the
            self-attention's width); defaults to `num_heads` (fewer after
            `kbert.analysis.prune_heads`).
        **kwargs: those of `T5Block`.

    Call arguments:
        inputs: `(batch, length, width)`.
        encoder_outputs: `(batch, encoder_length, width)`; required with cross-attention.
        padding_mask: 0/1 `(batch, length)`, or `(batch, max_length)` with a cache.
        encoder_padding_mask: 0/1 `(batch, encoder_length)`.
        attention_bias: self-attention score bias, broadcastable to
            `(batch, heads, length, key_length)`.
        self_attention_mask: bool, broadcastable to `(batch, length, key_length)`:
            the self-attention mask to use instead of the causal one built from
            the lengths (and `cache_update_index`); a decoding loop builds it
            once per step for all its blocks.
        self_attention_cache, cross_attention_cache, cache_update_index: see above.
        training: whether dropout is active.
        return_attention_probabilities: also return the self-attention
            probabilities `(batch, heads, length, length)` and the
            cross-attention ones `(batch, heads, length, encoder_length)`, as
            `(outputs, self_probabilities, cross_probabilities)` (the latter None
            without cross-attention). Not with a cache.
        head_mask: optional `(heads,)` or `(batch, heads)` factors on each
            self-attention head's output (see `MultiHeadAttention`).
        cross_attention_head_mask: the same for the cross-attention heads.

    Example:
    >>> block = CrossAttentionDecoderBlock(num_heads=2, intermediate_dim=32)
    >>> x, memory = keras.ops.ones((2, 3, 16)), keras.ops.ones((2, 5, 16))
    >>> tuple(block(x, encoder_outputs=memory).shape)
    (2, 3, 16)
    """

    def __init__(self, num_heads, intermediate_dim, use_cross_attention=True,
                 cross_attention_num_heads=None, **kwargs):
        super().__init__(num_heads, intermediate_dim, **kwargs)
        self.use_cross_attention = bool(use_cross_attention)
        self.cross_attention_num_heads = positive_int(
            "cross_attention_num_heads", cross_attention_num_heads, optional=True
        )

    def _build_attention(self, width, key_dim):
        super()._build_attention(width, key_dim)
        if self.use_cross_attention:
            self.cross_attention = self._attention(
                width, key_dim, "cross_attention", self.cross_attention_num_heads
            )
            self.cross_attention_layer_norm = self._norm(width, "cross_attention_layer_norm")
            self.cross_attention_dropout = self._dropout()

    def call(self, inputs, encoder_outputs=None, padding_mask=None, encoder_padding_mask=None,
             attention_bias=None, self_attention_mask=None, self_attention_cache=None,
             cross_attention_cache=None, cache_update_index=None, training=None,
             return_attention_probabilities=False, head_mask=None, cross_attention_head_mask=None):
        if self.use_cross_attention and encoder_outputs is None and cross_attention_cache is None:
            raise ValueError(
                "This CrossAttentionDecoderBlock has cross-attention: pass encoder_outputs "
                "(or a cross_attention_cache)."
            )
        if (self_attention_cache is None) != (cache_update_index is None):
            raise ValueError(
                "Pass self_attention_cache and cache_update_index together (or neither)."
            )
        caching = self_attention_cache is not None
        if caching and return_attention_probabilities:
            raise ValueError("return_attention_probabilities takes whole sequences, not a cache.")
        probabilities = {"return_probabilities": True} if return_attention_probabilities else {}
        x, second = self._residual(  # second: the updated cache, or the probabilities
            inputs,
            self.self_attention_layer_norm,
            self.self_attention_dropout,
            lambda h: self._self_attend(
                h, padding_mask, attention_bias, self_attention_mask, self_attention_cache,
                cache_update_index, training, head_mask, **probabilities,
            ),
            training,
        )
        cross_probabilities = None
        if self.use_cross_attention:
            x, cross_probabilities = self._residual(
                x,
                self.cross_attention_layer_norm,
                self.cross_attention_dropout,
                lambda h: self._cross_attend(
                    h, encoder_outputs, encoder_padding_mask, cross_attention_cache, training,
                    cross_attention_head_mask, **probabilities,
                ),
                training,
            )
        x = self._feed_forward(x, training)
        if return_attention_probabilities:
            return x, second, cross_probabilities
        return (x, second) if caching else x

    def _self_attend(self, x, padding_mask, attention_bias, mask, cache, index, training,
                     head_mask=None, return_probabilities=False):
        """Causal `SelfAttn(x)` (or masked by `mask`), through `cache` (written at `index`) if given."""
        causal = mask is None and padding_mask is None and starts_at_zero(index)
        if mask is None and not causal:
            query_length = ops.shape(x)[1]
            key_length = query_length if cache is None else ops.shape(cache)[3]
            mask = causal_mask(query_length, key_length, 0 if cache is None else index)
        return self.self_attention(
            x,
            padding_mask=padding_mask,
            attention_mask=mask,
            causal=causal,
            attention_bias=attention_bias,
            cache=cache,
            cache_update_index=index,
            training=training,
            head_mask=head_mask,
            return_probabilities=return_probabilities,
        )

    def _cross_attend(self, x, encoder_outputs, encoder_padding_mask, cache, training,
                      head_mask=None, return_probabilities=False):
        """`CrossAttn(x, encoder_outputs)`, from the projected `cache` if given.

        With `return_probabilities`, `(outputs, probabilities)`.
        """
        if cache is None:
            return self.cross_attention(
                x, value=encoder_outputs, padding_mask=encoder_padding_mask,
                training=training, return_probabilities=return_probabilities, head_mask=head_mask,
            )
        return self.cross_attention(
            x, padding_mask=encoder_padding_mask, cache=cache, training=training,
            head_mask=head_mask,
        )[0]

    def compute_output_spec(self, inputs, encoder_outputs=None, *args, self_attention_cache=None,
                            return_attention_probabilities=False, **kwargs):
        output = keras.KerasTensor(inputs.shape, self.compute_dtype)
        if return_attention_probabilities:
            dtype = self.compute_dtype
            cross = None
            if self.use_cross_attention:
                cross = probabilities_spec(
                    inputs, encoder_outputs, self.cross_attention.num_heads, dtype
                )
            return (output, probabilities_spec(inputs, inputs, self.self_attention.num_heads, dtype),
                    cross)
        if self_attention_cache is None:
            return output
        return output, keras.KerasTensor(self_attention_cache.shape, self_attention_cache.dtype)

    def get_config(self):
        config = super().get_config()
        config["use_cross_attention"] = self.use_cross_attention
        config["cross_attention_num_heads"] = self.cross_attention_num_heads
        return config


# `.keras` files written before the block was named by its role call it TransformerDecoder.
keras.saving.get_custom_objects()["kbert>TransformerDecoder"] = CrossAttentionDecoderBlock
