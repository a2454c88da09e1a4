import keras

from kbert.arguments import one_of, positive_int, positive_number, probability
from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.cached_multi_head_attention import CachedMultiHeadAttention
from kbert.layers.direct_call import DirectCall
from kbert.layers.dropout import Dropout, apply_dropout
from kbert.layers.fused_dense import FusedDense
from kbert.layers.initializers import clone_initializer
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.multi_head_attention import block_output_spec, kernel_choices
from kbert.layers.rms_normalization import RMSNormalization

NORMALIZATIONS = ("rms", "layer")


@keras.saving.register_keras_serializable(package="kbert")
class T5Block(DirectCall, keras.layers.Layer):
    """T5's block: pre-RMS-norm bidirectional self-attention and a feed-forward network.

    The block of T5's encoder stack, and the base of
    `CrossAttentionDecoderBlock`, the decoder block of T5 and BART.

    Pre-norm with RMS normalization (docs/algorithms.md §8):
    `x = x + Drop(SelfAttn(RMS(x), bias))`, then `x = x + Drop(FFN(RMS(x)))`,
    where the FFN is `wo·drop(act(wi·x))` (v1.0, ReLU) or, with
    `use_gated_activation`, `wo·drop(act(wi_0·x) ⊙ wi_1·x)` (v1.1, tanh GELU).
    No projection has a bias and the scores are not scaled by 1/√d. The
    relative position bias is computed once per stack (`RelativePositionBias`)
    and passed to every block as `attention_bias`.

    `CrossAttentionDecoderBlock` extends it with causal self-attention,
    cross-attention to the encoder output and key/value caches.

    Four switches turn the block into BART's (docs/algorithms.md §10): post-norm
    (`normalize_first=False`: `x = Norm(x + Drop(Sublayer(x)))`), LayerNorm
    (`normalization="layer"`), biased projections (`use_bias=True`) and
    scores scaled by `1/√d_kv` (`attention_scale=None`); `kernel_initializer`
    replaces T5's initialisation (BART: normal, std 0.02).

    Weights are initialised as in T5 with `initializer_factor` (docs/algorithms.md
    §8): q `(d·d_kv)^−½`, k and v `d^−½`, o `(h·d_kv)^−½`, wi `d^−½`, wo `d_ff^−½`.

    Args:
        num_heads: attention heads.
        intermediate_dim: feed-forward width `d_ff`.
        key_dim: width of each head `d_kv`; defaults to `width / num_heads`.
        dropout: dropout on the residual branches and inside the FFN (T5: 0.1).
        activation: feed-forward activation (`"relu"`, `"gelu_approximate"`, ...).
        use_gated_activation: the v1.1 gated feed-forward network.
        layer_norm_epsilon: RMS normalization epsilon (T5: 1e-6).
        initializer_factor: scale of the T5 initialisation.
        normalize_first: pre-norm (T5) or post-norm (BART).
        normalization: `"rms"` (T5) or `"layer"` (LayerNorm with a bias, BART).
        use_bias: biases on every projection (BART) or none (T5).
        attention_scale: factor on the scores; `None` is `1/√d_kv` (T5: 1.0).
        kernel_initializer: initializer of every kernel; `None` is T5's.
        attention_implementation: the attention layers' kernel, "auto", "fused"
            or "explicit" (see `MultiHeadAttention`).
        dropout_prng: the JAX generator of every dropout mask (see
            `kbert.layers.Dropout`); None: the process default.

    Call arguments:
        inputs: `(batch, length, width)`.
        padding_mask: 0/1 `(batch, length)`.
        attention_bias: self-attention score bias, broadcastable to
            `(batch, heads, length, length)`.
        training: whether dropout is active.
        return_attention_probabilities: also return the self-attention
            probabilities `(batch, heads, length, length)`, as `(outputs,
            probabilities)`.
        head_mask: optional `(heads,)` or `(batch, heads)` factors on each
            self-attention head's output (see `MultiHeadAttention`).

    Example:
    >>> block = T5Block(num_heads=2, intermediate_dim=32)
    >>> tuple(block(keras.ops.ones((2, 3, 16))).shape)
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
        initializer_factor=1.0,
        normalize_first=True,
        normalization="rms",
        use_bias=False,
        attention_scale=1.0,
        kernel_initializer=None,
        attention_implementation="auto",
        dropout_prng=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        self.num_heads = positive_int("num_heads", num_heads)
        self.intermediate_dim = positive_int("intermediate_dim", intermediate_dim)
        self.key_dim = positive_int("key_dim", key_dim, optional=True)
        self.dropout = probability("dropout", dropout)
        get_activation(activation)  # rejects an unknown name now, not at build
        self.activation = activation
        self.use_gated_activation = bool(use_gated_activation)
        self.layer_norm_epsilon = positive_number("layer_norm_epsilon", layer_norm_epsilon)
        self.initializer_factor = positive_number("initializer_factor", initializer_factor)
        self.normalize_first = bool(normalize_first)
        self.normalization = one_of("normalization", normalization, NORMALIZATIONS)
        self.use_bias = bool(use_bias)
        self.attention_scale = positive_number("attention_scale", attention_scale, optional=True)
        self.kernel_initializer = (
            None if kernel_initializer is None else keras.initializers.get(kernel_initializer)
        )

    # --- Sublayers --------------------------------------------------------------

    def _initializer(self, scale=1.0):
        if self.kernel_initializer is not None:
            return clone_initializer(self.kernel_initializer)
        # std = factor·sqrt(scale / fan_in): T5's per-weight stds (docs/algorithms.md §8).
        return keras.initializers.VarianceScaling(
            scale=self.initializer_factor**2 * scale,
            mode="fan_in",
            distribution="untruncated_normal",
        )

    def _attention(self, width, key_dim, name, num_heads=None):
        attention = CachedMultiHeadAttention(
            num_heads=num_heads or self.num_heads,
            key_dim=key_dim,
            dropout=self.dropout,
            use_bias=self.use_bias,
            scale=self.attention_scale,
            kernel_initializer=self._initializer(),
            query_kernel_initializer=self._initializer(1.0 / key_dim),
            attention_implementation=self.attention_implementation,
            dropout_prng=self.dropout_prng,
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build((None, None, width))
        return attention

    def _norm(self, width, name):
        if self.normalization == "layer":
            norm = LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        else:
            norm = RMSNormalization(self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
        norm.build((None, None, width))
        return norm

    def _dropout(self):
        return Dropout(self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng)

    def _dense(self, units, input_dim, name, activation=None):
        dense = FusedDense(
            units,
            activation=activation,
            use_bias=self.use_bias,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name=name,
        )
        dense.build((None, None, input_dim))
        return dense

    def build(self, inputs_shape):
        if len(inputs_shape) != 3 or inputs_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape (batch, length, width); "
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
        self._build_attention(width, key_dim)
        self._build_feed_forward(width)
        self.built = True

    def _build_attention(self, width, key_dim):
        """The attention sublayers (subclasses add theirs after these)."""
        self.self_attention = self._attention(width, key_dim, "self_attention")
        self.self_attention_layer_norm = self._norm(width, "self_attention_layer_norm")
        self.self_attention_dropout = self._dropout()

    def _build_feed_forward(self, width):
        self.ffn_layer_norm = self._norm(width, "ffn_layer_norm")
        self.intermediate_dense = self._dense(
            self.intermediate_dim, width, "intermediate_dense", activation=get_activation(self.activation)
        )
        if self.use_gated_activation:
            self.gate_dense = self._dense(self.intermediate_dim, width, "gate_dense")
        self.intermediate_dropout = self._dropout()
        self.output_dense = self._dense(width, self.intermediate_dim, "output_dense")
        self.ffn_dropout = self._dropout()

    # --- Forward ----------------------------------------------------------------

    def call(self, inputs, padding_mask=None, attention_bias=None, training=None,
             return_attention_probabilities=False, head_mask=None):
        x, probabilities = self._residual(
            inputs,
            self.self_attention_layer_norm,
            self.self_attention_dropout,
            lambda h: self.self_attention(
                h,
                padding_mask=padding_mask,
                attention_bias=attention_bias,
                training=training,
                return_probabilities=return_attention_probabilities,
                head_mask=head_mask,
            ),
            training,
        )
        x = self._feed_forward(x, training)
        return (x, probabilities) if return_attention_probabilities else x

    def _residual(self, x, norm, dropout, sublayer, training):
        """`(x + Drop(f(Norm(x))), extra)` pre-norm, `(Norm(x + Drop(f(x))), extra)` post-norm.

        `extra` is the second output of a sublayer `f` that returns a pair (a
        cache, probabilities), else None.
        """
        outputs = sublayer(norm(x) if self.normalize_first else x)
        extra = None
        if isinstance(outputs, (tuple, list)):
            outputs, extra = outputs
        x = x + apply_dropout(dropout, outputs, training)
        return (x if self.normalize_first else norm(x)), extra

    def _feed_forward(self, x, training):
        """`x + Drop(FFN(Norm(x)))`, or its post-norm form."""
        return self._residual(
            x, self.ffn_layer_norm, self.ffn_dropout, lambda h: self._ffn(h, training), training
        )[0]

    def _ffn(self, x, training):
        hidden = self.intermediate_dense(x)
        if self.use_gated_activation:
            hidden = hidden * self.gate_dense(x)
        return self.output_dense(apply_dropout(self.intermediate_dropout, hidden, training))

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape

    def compute_output_spec(self, inputs, *args, return_attention_probabilities=False, **kwargs):
        return block_output_spec(self, inputs, self.self_attention.num_heads, return_attention_probabilities)

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
                "initializer_factor": self.initializer_factor,
                "normalize_first": self.normalize_first,
                "normalization": self.normalization,
                "use_bias": self.use_bias,
                "attention_scale": self.attention_scale,
                "attention_implementation": self.attention_implementation,
                "dropout_prng": self.dropout_prng,
                "kernel_initializer": (
                    None
                    if self.kernel_initializer is None
                    else keras.initializers.serialize(self.kernel_initializer)
                ),
            }
        )
        return config


# `.keras` files written before the block was named by its role call it T5EncoderBlock.
keras.saving.get_custom_objects()["kbert>T5EncoderBlock"] = T5Block
