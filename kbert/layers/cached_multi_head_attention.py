import keras
from keras import ops

from kbert.layers.attention_mask import merge_attention_masks
from kbert.layers.initializers import clone_initializer
from kbert.layers.multi_head_attention import MultiHeadAttention


@keras.saving.register_keras_serializable(package="kbert")
class CachedMultiHeadAttention(MultiHeadAttention):
    """`MultiHeadAttention` with an additive score bias and a key/value cache.

    Adds what a decoder needs to `MultiHeadAttention` (same weights, same
    arguments): an `attention_bias` added to the scores before the mask and the
    float32 softmax (T5's relative position bias), and a fixed-size key/value
    cache for incremental decoding under XLA.

    The cache is one tensor `(batch, 2, cache_length, heads, key_dim)` holding
    projected keys and values. With `cache_update_index`, the keys and values
    of `value` are written at that position (`keras.ops.slice_update`, static
    shapes) and the query attends to the whole updated cache (mask the
    positions not written yet with `attention_mask`); without it the cache is
    used as it is (cross-attention to an encoder output projected once with
    `compute_cache`).

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
        cache: `(batch, 2, cache_length, heads, key_dim)`, or None.
        cache_update_index: int or scalar tensor: where `value`'s keys/values go.

    Returns:
        The attention output, and with a cache also the (updated) cache.

    Example:
    >>> attention = CachedMultiHeadAttention(num_heads=2, key_dim=4, use_bias=False)
    >>> x = keras.ops.ones((1, 1, 8))
    >>> cache = keras.ops.zeros((1, 2, 5, 2, 4))
    >>> out, cache = attention(x, cache=cache, cache_update_index=0)
    >>> tuple(out.shape), tuple(cache.shape)
    ((1, 1, 8), (1, 2, 5, 2, 4))
    """

    def __init__(self, num_heads, key_dim, query_kernel_initializer=None, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        self.query_kernel_initializer = keras.initializers.get(
            query_kernel_initializer or self.kernel_initializer
        )

    def _dense(self, units, name):
        dense = super()._dense(units, name)
        if name == "query":
            dense.kernel_initializer = clone_initializer(self.query_kernel_initializer)
        return dense

    def compute_cache(self, value):
        """Projected keys and values of `value` `(batch, length, width)` as a cache."""
        self._check_cacheable()
        k = self.split_heads(self.key_dense(value), self.key_dim)
        v = self.split_heads(self.value_dense(value), self.value_dim)
        return ops.stack([k, v], axis=1)

    def _check_cacheable(self):
        if self.value_dim != self.key_dim:
            raise ValueError(
                "A key/value cache needs value_dim == key_dim; received "
                f"key_dim={self.key_dim}, value_dim={self.value_dim}."
            )

    def call(
        self,
        query,
        value=None,
        key=None,
        padding_mask=None,
        attention_mask=None,
        attention_bias=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        q = self.split_heads(self.query_dense(query), self.key_dim)
        if cache is None:
            k = self.split_heads(self.key_dense(key), self.key_dim)
            v = self.split_heads(self.value_dense(value), self.value_dim)
        else:
            self._check_cacheable()
            if len(cache.shape) != 5:
                raise ValueError(
                    "cache must have shape (batch, 2, cache_length, heads, key_dim); "
                    f"received shape {tuple(cache.shape)}."
                )
            if cache_update_index is not None:
                k = self.split_heads(self.key_dense(key), self.key_dim)
                v = self.split_heads(self.value_dense(value), self.value_dim)
                update = ops.cast(ops.stack([k, v], axis=1), cache.dtype)
                start = [0, 0, cache_update_index, 0, 0]
                cache = ops.slice_update(cache, start, update)
            k, v = cache[:, 0], cache[:, 1]
        mask = merge_attention_masks(padding_mask, attention_mask)
        context = self.attend(q, k, v, mask=mask, bias=attention_bias, training=training)
        shape = ops.shape(context)
        context = ops.reshape(context, (shape[0], shape[1], self.num_heads * self.value_dim))
        output = self.output_dense(context)
        return output if cache is None else (output, cache)

    def attend(self, query, key, value, mask=None, bias=None, training=None):
        """`MultiHeadAttention.attend`, with `bias` added to the scaled scores in float32."""
        if bias is None:
            return super().attend(query, key, value, mask=mask, training=training)
        scores = ops.einsum("bqnh,bknh->bnqk", query, key)
        scores = ops.cast(scores, "float32") * self.score_scale + ops.cast(bias, "float32")
        if mask is not None:
            scores = ops.where(mask, scores, -1e9)
        probabilities = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probabilities = self.dropout_layer(probabilities, training=training)
        return ops.einsum("bnqk,bknh->bqnh", probabilities, value)

    def compute_output_spec(self, query, *args, cache=None, **kwargs):
        output = keras.KerasTensor(self.compute_output_shape(query.shape), self.compute_dtype)
        if cache is None:
            return output
        return output, keras.KerasTensor(cache.shape, cache.dtype)

    def get_config(self):
        config = super().get_config()
        config["query_kernel_initializer"] = keras.initializers.serialize(
            self.query_kernel_initializer
        )
        return config
