"""One XLNet block: two-stream relative attention, then a feed-forward layer shared by both streams."""

import keras

from kbert.arguments import positive_int, probability
from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.dropout import Dropout, apply_dropout, checked_dropout_prng
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.two_stream_relative_attention import (
    TwoStreamRelativeAttention,
    two_stream_output_spec,
)


@keras.saving.register_keras_serializable(package="kbert")
class TwoStreamEncoderBlock(keras.layers.Layer):
    """An XLNet layer: `TwoStreamRelativeAttention`, then `LN(x + W2 act(W1 x))` on each stream.

    The feed-forward weights are shared by the content and the query stream
    (post-LN, dropout after each dense layer), as transformers' `XLNetLayer`.

    Args:
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        dropout: dropout rate everywhere in the block.
        activation: feed-forward activation (XLNet: "gelu").
        layer_norm_epsilon: of both LayerNorms.
        clamp_length: see `TwoStreamRelativeAttention`.
        dropout_prng: the JAX generator of the dropout masks (see
            `kbert.layers.Dropout`); None: the process default.

    Call arguments: those of `TwoStreamRelativeAttention`.

    Example:
    >>> block = TwoStreamEncoderBlock(num_heads=2, intermediate_dim=16)
    >>> h = keras.ops.ones((1, 3, 8))
    >>> ids, mask = keras.ops.zeros((1, 3), "int32"), keras.ops.ones((1, 3), "int32")
    >>> tuple(block(h, ids, mask).shape)
    (1, 3, 8)
    """

    def __init__(self, num_heads, intermediate_dim, dropout=0.1, activation="gelu",
                 layer_norm_epsilon=1e-12, clamp_length=-1, dropout_prng=None, **kwargs):
        super().__init__(**kwargs)
        self.dropout_prng = checked_dropout_prng(dropout_prng)
        self.num_heads = positive_int("num_heads", num_heads)
        self.intermediate_dim = positive_int("intermediate_dim", intermediate_dim)
        self.dropout = probability("dropout", dropout)
        self.activation = serialize_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.clamp_length = clamp_length
        self.attention_layer = None
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, dropout_prng=self.dropout_prng)
        normal = keras.initializers.RandomNormal(stddev=0.02)
        self.intermediate_dense = keras.layers.Dense(
            intermediate_dim, activation=get_activation(activation), kernel_initializer=normal,
            dtype=self.dtype_policy, name="intermediate_dense",
        )
        self.output_dense = None
        self.output_layer_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="output_layer_norm"
        )

    def build(self, content_shape, *args, **kwargs):
        hidden = int(content_shape[-1])
        if hidden % self.num_heads:
            raise ValueError(f"hidden width {hidden} is not divisible by num_heads={self.num_heads}.")
        self.attention_layer = TwoStreamRelativeAttention(
            self.num_heads, hidden // self.num_heads, self.dropout, self.layer_norm_epsilon,
            self.clamp_length, dropout_prng=self.dropout_prng, dtype=self.dtype_policy, name="attention_layer",
        )
        self.output_dense = keras.layers.Dense(
            hidden, kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=self.dtype_policy, name="output_dense",
        )
        self.attention_layer.build(content_shape)
        self.intermediate_dense.build(content_shape)
        self.output_dense.build((*content_shape[:-1], self.intermediate_dim))
        self.output_layer_norm.build(content_shape)
        self.built = True

    def feed_forward(self, x, training=None):
        """`LN(x + dropout(W2 dropout(act(W1 x))))`."""
        y = apply_dropout(self.dropout_layer, self.intermediate_dense(x), training)
        y = apply_dropout(self.dropout_layer, self.output_dense(y), training)
        return self.output_layer_norm(x + y)

    def call(self, content, segment_ids, padding_mask, query=None, permutation_mask=None,
             target_mapping=None, memory=None, training=None):
        outputs = self.attention_layer(
            content, segment_ids, padding_mask, query=query, permutation_mask=permutation_mask,
            target_mapping=target_mapping, memory=memory, training=training,
        )
        if query is None:
            return self.feed_forward(outputs, training)
        return tuple(self.feed_forward(stream, training) for stream in outputs)

    def compute_output_spec(self, content, *args, query=None, **kwargs):
        return two_stream_output_spec(self, content, query)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "clamp_length": self.clamp_length,
            "dropout_prng": self.dropout_prng,
        }
