import keras
from keras import ops

from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.cached_multi_head_attention import CachedMultiHeadAttention
from kbert.layers.rms_normalization import RMSNormalization


@keras.saving.register_keras_serializable(package="kbert")
class TransformerDecoder(keras.layers.Layer):
    """T5's transformer block: causal self-attention, cross-attention, feed-forward.

    Pre-norm with RMS normalization (ALGORITHMS.md §3):
    `x = x + Drop(SelfAttn(RMS(x), bias))`, then
    `x = x + Drop(CrossAttn(RMS(x), encoder_outputs))`, then
    `x = x + Drop(FFN(RMS(x)))`, where the FFN is `wo·drop(act(wi·x))` (v1.0,
    ReLU) or, with `use_gated_activation`, `wo·drop(act(wi_0·x) ⊙ wi_1·x)`
    (v1.1, tanh GELU). No projection has a bias and the scores are not scaled
    by 1/√d. The relative position bias is computed once per stack
    (`RelativePositionBias`) and passed to every block as `attention_bias`;
    cross-attention gets none.

    Incremental decoding: pass `self_attention_cache`
    `(batch, heads, 2, max_length, key_dim)` and `cache_update_index`; the
    step's keys and values are written at that index and the call returns
    `(outputs, self_attention_cache)`. `cross_attention_cache` (from
    `cross_attention.compute_cache(encoder_outputs)`) saves re-projecting the
    encoder output every step.

    With `use_cross_attention=False` and `causal=False` the same block is T5's
    encoder block (as Hugging Face's `T5Block` serves both stacks).

    Weights are initialised as in T5 with `initializer_factor` (ALGORITHMS.md
    §3): q `(d·d_kv)^−½`, k and v `d^−½`, o `(h·d_kv)^−½`, wi `d^−½`, wo `d_ff^−½`.

    Args:
        num_heads: attention heads.
        intermediate_dim: feed-forward width `d_ff`.
        key_dim: width of each head `d_kv`; defaults to `width / num_heads`.
        dropout: dropout on the residual branches and inside the FFN (T5: 0.1).
        activation: feed-forward activation (`"relu"`, `"gelu_approximate"`, ...).
        use_gated_activation: the v1.1 gated feed-forward network.
        layer_norm_epsilon: RMS normalization epsilon (T5: 1e-6).
        use_cross_attention: attend to `encoder_outputs`.
        causal: mask future positions in self-attention.
        initializer_factor: scale of the T5 initialisation.

    Call arguments:
        inputs: `(batch, length, width)`.
        encoder_outputs: `(batch, encoder_length, width)`; required with cross-attention.
        padding_mask: 0/1 `(batch, length)`, or `(batch, max_length)` with a cache.
        encoder_padding_mask: 0/1 `(batch, encoder_length)`.
        attention_bias: self-attention score bias, broadcastable to
            `(batch, heads, length, key_length)`.
        self_attention_cache, cross_attention_cache, cache_update_index: see above.
        training: whether dropout is active.

    Example:
    >>> block = TransformerDecoder(num_heads=2, intermediate_dim=32)
    >>> x, memory = keras.ops.ones((2, 3, 16)), keras.ops.ones((2, 5, 16))
    >>> tuple(block(x, encoder_outputs=memory).shape)
    (2, 3, 16)
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        key_dim=None,
        dropout=0.1,
        activation="relu",
        use_gated_activation=False,
        layer_norm_epsilon=1e-6,
        use_cross_attention=True,
        causal=True,
        initializer_factor=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.intermediate_dim = int(intermediate_dim)
        self.key_dim = None if key_dim is None else int(key_dim)
        self.dropout = float(dropout)
        self.activation = activation
        self.use_gated_activation = bool(use_gated_activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.use_cross_attention = bool(use_cross_attention)
        self.causal = bool(causal)
        self.initializer_factor = float(initializer_factor)

    def _initializer(self, scale=1.0):
        # std = factor·sqrt(scale / fan_in): T5's per-weight stds (ALGORITHMS.md §3).
        return keras.initializers.VarianceScaling(
            scale=self.initializer_factor**2 * scale,
            mode="fan_in",
            distribution="untruncated_normal",
        )

    def _attention(self, width, key_dim, name):
        attention = CachedMultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=key_dim,
            dropout=self.dropout,
            use_bias=False,
            scale=1.0,
            kernel_initializer=self._initializer(),
            query_kernel_initializer=self._initializer(1.0 / key_dim),
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build((None, None, width))
        return attention

    def _norm(self, width, name):
        norm = RMSNormalization(self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
        norm.build((None, None, width))
        return norm

    def _dense(self, units, input_dim, name, activation=None):
        dense = keras.layers.Dense(
            units,
            activation=activation,
            use_bias=False,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name=name,
        )
        dense.build((None, None, input_dim))
        return dense

    def build(self, inputs_shape, encoder_outputs_shape=None):
        if len(inputs_shape) != 3 or inputs_shape[-1] is None:
            raise ValueError(
                "TransformerDecoder expects inputs of shape (batch, length, width); "
                f"received shape {tuple(inputs_shape)}."
            )
        width = inputs_shape[-1]
        key_dim = self.key_dim
        if key_dim is None:
            if width % self.num_heads:
                raise ValueError(
                    f"width {width} is not divisible by num_heads={self.num_heads}; "
                    "pass key_dim."
                )
            key_dim = width // self.num_heads
        self.self_attention = self._attention(width, key_dim, "self_attention")
        self.self_attention_layer_norm = self._norm(width, "self_attention_layer_norm")
        self.self_attention_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        if self.use_cross_attention:
            self.cross_attention = self._attention(width, key_dim, "cross_attention")
            self.cross_attention_layer_norm = self._norm(width, "cross_attention_layer_norm")
            self.cross_attention_dropout = keras.layers.Dropout(
                self.dropout, dtype=self.dtype_policy
            )
        self.ffn_layer_norm = self._norm(width, "ffn_layer_norm")
        self.intermediate_dense = self._dense(
            self.intermediate_dim, width, "intermediate", activation=get_activation(self.activation)
        )
        if self.use_gated_activation:
            self.gate_dense = self._dense(self.intermediate_dim, width, "gate")
        self.intermediate_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = self._dense(width, self.intermediate_dim, "output")
        self.ffn_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def _causal_mask(self, query_length, key_length, offset):
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
        key_positions = ops.arange(key_length, dtype="int32")
        return ops.expand_dims(key_positions[None, :] <= query_positions[:, None], 0)

    def call(
        self,
        inputs,
        encoder_outputs=None,
        padding_mask=None,
        encoder_padding_mask=None,
        attention_bias=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_update_index=None,
        training=None,
    ):
        if self.use_cross_attention and encoder_outputs is None and cross_attention_cache is None:
            raise ValueError(
                "This TransformerDecoder has cross-attention: pass encoder_outputs "
                "(or a cross_attention_cache)."
            )
        if (self_attention_cache is None) != (cache_update_index is None):
            raise ValueError(
                "Pass self_attention_cache and cache_update_index together (or neither)."
            )
        caching = self_attention_cache is not None
        x = inputs
        attention_mask = None
        if self.causal:
            query_length = ops.shape(x)[1]
            key_length = ops.shape(self_attention_cache)[3] if caching else query_length
            offset = cache_update_index if caching else 0
            attention_mask = self._causal_mask(query_length, key_length, offset)

        residual = x
        x = self.self_attention_layer_norm(x)
        x = self.self_attention(
            x,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            cache=self_attention_cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        if caching:
            x, self_attention_cache = x
        x = residual + self.self_attention_dropout(x, training=training)

        if self.use_cross_attention:
            residual = x
            x = self.cross_attention_layer_norm(x)
            if cross_attention_cache is None:
                x = self.cross_attention(
                    x,
                    value=encoder_outputs,
                    padding_mask=encoder_padding_mask,
                    training=training,
                )
            else:
                x, _ = self.cross_attention(
                    x,
                    padding_mask=encoder_padding_mask,
                    cache=cross_attention_cache,
                    training=training,
                )
            x = residual + self.cross_attention_dropout(x, training=training)

        residual = x
        x = self.ffn_layer_norm(x)
        hidden = self.intermediate_dense(x)
        if self.use_gated_activation:
            hidden = hidden * self.gate_dense(x)
        x = self.output_dense(self.intermediate_dropout(hidden, training=training))
        x = residual + self.ffn_dropout(x, training=training)
        return (x, self_attention_cache) if caching else x

    def compute_output_spec(self, inputs, *args, self_attention_cache=None, **kwargs):
        output = keras.KerasTensor(inputs.shape, self.compute_dtype)
        if self_attention_cache is None:
            return output
        return output, keras.KerasTensor(self_attention_cache.shape, self_attention_cache.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "activation": serialize_activation(self.activation),
                "use_gated_activation": self.use_gated_activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_cross_attention": self.use_cross_attention,
                "causal": self.causal,
                "initializer_factor": self.initializer_factor,
            }
        )
        return config
