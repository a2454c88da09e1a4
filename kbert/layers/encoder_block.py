import keras

from kbert.arguments import positive_int, positive_number, probability
from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.direct_call import DirectCall
from kbert.layers.dropout import Dropout, apply_dropout
from kbert.layers.fused_dense import FusedDense
from kbert.layers.initializers import clone_initializer
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.multi_head_attention import MultiHeadAttention, block_output_spec, kernel_choices
from kbert.layers.sequence_shape import check_sequence_shape


@keras.saving.register_keras_serializable(package="kbert")
class EncoderBlock(DirectCall, keras.layers.Layer):
    """One transformer encoder block: self-attention and a feed-forward network.

    The block of the BERT family's `Encoder` and of BART's encoder stack;
    `CausalDecoderBlock` (GPT-2's) is this block with a cached causal
    self-attention.

    Post-LN (BERT, the default): `x = LN(x + Drop(Attn(x)))`, then
    `x = LN(x + Drop(W2·act(W1·x)))`. Pre-LN (`normalize_first=True`):
    `x = x + Drop(Attn(LN(x)))`, then `x = x + Drop(FFN(LN(x)))`.

    The attention layer is pluggable: pass any layer with the
    `MultiHeadAttention` call signature (`BigBirdAttention`,
    `LongformerAttention`, or your own) as `attention_layer`; by default a dense
    `MultiHeadAttention` with `num_heads` heads is built.

    Args:
        num_heads: heads of the default attention layer.
        intermediate_dim: width of the feed-forward hidden layer.
        dropout: dropout after attention and after the feed-forward network.
        attention_dropout: dropout on attention probabilities; defaults to `dropout`.
        activation: feed-forward activation; `"gelu"` is the exact erf form.
        layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12).
        normalize_first: pre-LN instead of post-LN.
        kernel_initializer: initializer of every kernel (BERT: truncated normal 0.02).
        output_kernel_initializer: initializer of the feed-forward output
            projection (GPT-2 scales it by `1/sqrt(2 * num_layers)`); defaults
            to `kernel_initializer`.
        attention_layer: optional attention layer to use instead of the default.
        attention_implementation: the default attention layer's kernel, "auto",
            "fused" or "explicit" (see `MultiHeadAttention`).
        dropout_prng: the JAX generator of every dropout mask (see
            `kbert.layers.Dropout`); None: the process default.

    Call arguments:
        inputs: `(batch, sequence, hidden)`.
        padding_mask: 0/1 `(batch, sequence)`.
        attention_mask: 0/1 `(batch, sequence, sequence)`.
        training: whether dropout is active.
        global_attention_mask: 0/1 `(batch, sequence)`, passed on to an
            attention layer with global tokens (one that declares
            `takes_global_attention_mask`, such as `LongformerAttention`).
        return_attention_probabilities: also return the attention layer's
            probabilities `(batch, heads, sequence, sequence)`, as
            `(outputs, probabilities)` (dense attention).
        head_mask: optional `(heads,)` or `(batch, heads)` factors on each
            attention head's output (see `MultiHeadAttention`).

    Example:
    >>> block = EncoderBlock(num_heads=2, intermediate_dim=32)
    >>> tuple(block(keras.ops.ones((2, 6, 16))).shape)
    (2, 6, 16)
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        attention_dropout=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        normalize_first=False,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        attention_layer=None,
        attention_implementation="auto",
        dropout_prng=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_implementation, self.dropout_prng = kernel_choices(attention_implementation, dropout_prng)
        self.num_heads = positive_int("num_heads", num_heads)
        self.intermediate_dim = positive_int("intermediate_dim", intermediate_dim)
        self.dropout = probability("dropout", dropout)
        self.attention_dropout = probability(
            "attention_dropout", dropout if attention_dropout is None else attention_dropout
        )
        get_activation(activation)  # rejects an unknown name now, not at build
        self.activation = activation
        self.layer_norm_epsilon = positive_number("layer_norm_epsilon", layer_norm_epsilon)
        self.normalize_first = bool(normalize_first)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or self.kernel_initializer
        )
        if isinstance(attention_layer, dict):
            attention_layer = keras.saving.deserialize_keras_object(attention_layer)
        self.attention_layer = attention_layer

    def _initializer(self):
        return clone_initializer(self.kernel_initializer)

    def _layer_norm(self, name):
        return LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _default_attention_layer(self, key_dim, attention_class=MultiHeadAttention, **arguments):
        """The attention layer built when none is passed in: `attention_class` with `arguments`."""
        return attention_class(
            num_heads=self.num_heads,
            key_dim=key_dim,
            dropout=self.attention_dropout,
            kernel_initializer=self._initializer(),
            attention_implementation=self.attention_implementation,
            dropout_prng=self.dropout_prng,
            dtype=self.dtype_policy,
            name="attention_layer",
            **arguments,
        )

    def build(self, inputs_shape):
        check_sequence_shape(self, inputs_shape)
        hidden_dim = inputs_shape[-1]
        if self.attention_layer is None:
            if hidden_dim % self.num_heads:
                raise ValueError(
                    f"hidden size {hidden_dim} is not divisible by num_heads={self.num_heads}."
                )
            self.attention_layer = self._default_attention_layer(hidden_dim // self.num_heads)
        if not self.attention_layer.built:
            # A layer passed in (or deserialized from a config) may be built already.
            self.attention_layer.build(inputs_shape)
        self.attention_layer_norm = self._layer_norm("attention_layer_norm")
        self.attention_layer_norm.build(inputs_shape)
        self.attention_output_dropout = Dropout(self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng)
        self.intermediate_dense = FusedDense(
            self.intermediate_dim,
            activation=get_activation(self.activation),
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = FusedDense(
            hidden_dim,
            kernel_initializer=clone_initializer(self.output_kernel_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self.output_layer_norm = self._layer_norm("output_layer_norm")
        self.output_layer_norm.build(inputs_shape)
        self.output_dropout = Dropout(self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        global_attention_mask=None,
        return_attention_probabilities=False,
        head_mask=None,
    ):
        # Passed through only when given: only attention layers with global
        # tokens (`takes_global_attention_mask`) take a global mask, and an
        # attention layer of one's own need not take a head mask.
        optional = {}
        if global_attention_mask is not None:
            optional["global_attention_mask"] = global_attention_mask
        x, probabilities = self._forward(
            inputs, padding_mask, attention_mask, training, return_attention_probabilities,
            head_mask, **optional,
        )
        return (x, probabilities) if return_attention_probabilities else x

    def _forward(self, inputs, padding_mask, attention_mask, training,
                 return_probabilities=False, head_mask=None, **attention_arguments):
        """`(outputs, second)`: the block on `inputs`, and the attention layer's second
        output (probabilities, an updated cache) or None."""
        if head_mask is not None:
            attention_arguments["head_mask"] = head_mask
        if return_probabilities:
            attention_arguments["return_probabilities"] = True
        residual = inputs
        x = self.attention_layer_norm(inputs) if self.normalize_first else inputs
        x = self.attention_layer(
            x,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            training=training,
            **attention_arguments,
        )
        second = None
        if isinstance(x, (tuple, list)):
            x, second = x
        x = residual + apply_dropout(self.attention_output_dropout, x, training)
        if not self.normalize_first:
            x = self.attention_layer_norm(x)

        residual = x
        if self.normalize_first:
            x = self.output_layer_norm(x)
        x = self.output_dense(self.intermediate_dense(x))
        x = residual + apply_dropout(self.output_dropout, x, training)
        if not self.normalize_first:
            x = self.output_layer_norm(x)
        return x, second

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, *args, return_attention_probabilities=False, **kwargs):
        return block_output_spec(self, inputs, self.attention_layer.num_heads, return_attention_probabilities)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": serialize_activation(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_kernel_initializer": keras.initializers.serialize(
                    self.output_kernel_initializer
                ),
                "attention_layer": keras.saving.serialize_keras_object(self.attention_layer),
                "attention_implementation": self.attention_implementation,
                "dropout_prng": self.dropout_prng,
            }
        )
        return config


# `.keras` files written before the block was named by its role call it TransformerEncoder.
keras.saving.get_custom_objects()["kbert>TransformerEncoder"] = EncoderBlock
