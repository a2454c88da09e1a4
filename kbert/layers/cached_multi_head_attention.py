import keras
from keras import ops

from kbert.backend.ops import with_causal_mask, write_cache
from kbert.layers.attention_mask import merge_attention_masks
from kbert.layers.initializers import clone_initializer
from kbert.layers.multi_head_attention import MultiHeadAttention, mask_heads


@keras.saving.register_keras_serializable(package="kbert")
class CachedMultiHeadAttention(MultiHeadAttention):
    """`MultiHeadAttention` with an additive score bias and a key/value cache.

    Adds what a decoder needs to `MultiHeadAttention` (same weights, same
    arguments): an `attention_bias` added to the scaled scores before the mask
    and the softmax (T5's relative position bias; it goes into the fused
    kernel like the mask), and a fixed-size key/value cache for incremental
    decoding under XLA.

    The cache is one tensor `(batch, heads, 2, cache_length, key_dim)` holding
    projected keys and values, heads first so that each head's keys and values
    reach the attention kernel as strided views, without a copy. With `cache_update_index`, the
    keys and values of `value` are written at that position
    (`keras.ops.slice_update`, static shapes; in place on PyTorch inside
    `kbert.backend.fast_paths.in_place_cache_writes()`, which decoding loops
    enter: they never read a cache again after passing it on) and the query
    attends to the whole updated cache
    (mask the positions not written yet with `attention_mask`); without it the
    cache is used as it is (cross-attention to an encoder output projected
    once with `compute_cache`).

    Args:
        query_kernel_initializer: initializer of the query projection only
            (T5 initialises it narrower than the others); defaults to
            `kernel_initializer`.
        **kwargs: those of `MultiHeadAttention`; `value_dim` must equal
            `key_dim` to use a cache.

    Call arguments:
        query, value, key, padding_mask, attention_mask, training: as in
            `MultiHeadAttention`; `padding_mask` and `attention_mask` cover the
            cache positions when a cache is given.
        attention_bias: float, broadcastable to `(batch, heads, query_length, key_length)`.
        cache: `(batch, heads, 2, cache_length, key_dim)`, or None.
        cache_update_index: int or scalar tensor: where `value`'s keys/values go.
        head_mask: optional `(heads,)` or `(batch, heads)` factors on each
            head's output, as in `MultiHeadAttention`.
        causal: query `i` attends only keys `j <= i` (counted from the first
            key, so with a cache only for a write at index 0: a prompt),
            besides the masks. Without masks or a bias the fused kernel gets it
            as a flag (PyTorch's `is_causal`), which keeps its flash kernel eligible.

    Returns:
        The attention output, and with a cache also the (updated) cache.

    Example:
    >>> attention = CachedMultiHeadAttention(num_heads=2, key_dim=4, use_bias=False)
    >>> x = keras.ops.ones((1, 1, 8))
    >>> cache = keras.ops.zeros((1, 2, 2, 5, 4))
    >>> out, cache = attention(x, cache=cache, cache_update_index=0)
    >>> tuple(out.shape), tuple(cache.shape)
    ((1, 1, 8), (1, 2, 2, 5, 4))
    """

    def __init__(self, num_heads, key_dim, query_kernel_initializer=None,
                 output_kernel_initializer=None, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        self.query_kernel_initializer = keras.initializers.get(
            query_kernel_initializer or self.kernel_initializer
        )
        # None: the output projection takes `kernel_initializer` (no second copy drawn).
        self.output_kernel_initializer = (
            None if output_kernel_initializer is None
            else keras.initializers.get(output_kernel_initializer)
        )

    def _dense(self, units, name):
        dense = super()._dense(units, name)
        if name == "query_dense":
            dense.kernel_initializer = clone_initializer(self.query_kernel_initializer)
        if name == "output_dense" and self.output_kernel_initializer is not None:
            dense.kernel_initializer = clone_initializer(self.output_kernel_initializer)
        return dense

    def compute_cache(self, value):
        """Projected keys and values of `value` `(batch, length, width)` as a cache.

        Returns `(batch, heads, 2, length, key_dim)`.
        """
        self._check_cacheable()
        # Stacking the transposed heads lays them out contiguously.
        return ops.stack(self._project(value, value), axis=2)

    def _project(self, key, value):
        """Projected keys and values, each `(batch, heads, length, key_dim)`."""
        k = ops.transpose(self.split_heads(self.key_dense(key), self.key_dim), (0, 2, 1, 3))
        v = ops.transpose(self.split_heads(self.value_dense(value), self.value_dim), (0, 2, 1, 3))
        return k, v

    def _check_cacheable(self):
        if self.value_dim != self.key_dim:
            raise ValueError(
                "A key/value cache needs value_dim == key_dim; received "
                f"key_dim={self.key_dim}, value_dim={self.value_dim}."
            )

    def call(self, query, value=None, key=None, padding_mask=None, attention_mask=None, attention_bias=None,
             cache=None, cache_update_index=None, training=None,
             return_probabilities=False, head_mask=None, causal=False):
        value = query if value is None else value
        key = value if key is None else key
        mask = merge_attention_masks(padding_mask, attention_mask)
        q = self.split_heads(self.query_dense(query), self.key_dim)
        if cache is None:
            if causal and return_probabilities:
                mask = with_causal_mask(mask, ops.shape(query)[1], ops.shape(key)[1])
            k = self.split_heads(self.key_dense(key), self.key_dim)
            v = self.split_heads(self.value_dense(value), self.value_dim)
            if return_probabilities:
                context, probabilities = self._explicit_attention(
                    q, k, v, mask, attention_bias, training
                )
                return (
                    self._output(context, head_mask),
                    mask_heads(self, probabilities, head_mask, heads_axis=1),
                )
            context = self.attend(q, k, v, mask=mask, bias=attention_bias, training=training,
                                  causal=causal)
            return self._output(context, head_mask)
        self._check_cacheable()
        if len(cache.shape) != 5 or cache.shape[2] != 2:
            raise ValueError(
                "cache must have shape (batch, heads, 2, cache_length, key_dim); "
                f"received shape {tuple(cache.shape)}."
            )
        if cache_update_index is None:
            keys, values = cache[:, :, 0], cache[:, :, 1]
        else:
            cache, keys, values = write_cache(cache, *self._project(key, value), cache_update_index)
        # The heads-first halves reach the kernel as strided views (no copy on PyTorch).
        context = self.attend(q, keys, values, mask=mask, training=training, bias=attention_bias,
                              key_value_heads_first=True, causal=causal)
        return self._output(context, head_mask), cache

    def _output(self, context, head_mask):
        """The output projection of the heads' `context`, each scaled by its `head_mask` entry."""
        return self.output_dense(self.merge_heads(mask_heads(self, context, head_mask)))

    def compute_output_spec(self, query, value=None, key=None, *args, cache=None,
                            return_probabilities=False, **kwargs):
        if return_probabilities:
            return super().compute_output_spec(query, value, key, return_probabilities=True)
        output = keras.KerasTensor(self.compute_output_shape(query.shape), self.compute_dtype)
        if cache is None:
            return output
        return output, keras.KerasTensor(cache.shape, cache.dtype)

    def get_config(self):
        config = super().get_config()
        config["query_kernel_initializer"] = keras.initializers.serialize(
            self.query_kernel_initializer
        )
        config["output_kernel_initializer"] = (
            None if self.output_kernel_initializer is None
            else keras.initializers.serialize(self.output_kernel_initializer)
        )
        return config
