import keras
from keras import ops

from kbert.arguments import positive_int, positive_number
from kbert.layers.activations import get_activation, serialize_activation
from kbert.layers.fused_dense import FusedDense
from kbert.layers.initializers import clone_initializer
from kbert.layers.layer_normalization import LayerNormalization
from kbert.layers.reversible_embedding import tied_embedding_dim


@keras.saving.register_keras_serializable(package="kbert")
class VocabularyHead(keras.layers.Layer):
    """Base of the output heads that end in vocabulary logits: a decoder plus a bias.

    With `token_embedding` (a `ReversibleEmbedding`, usually the backbone's)
    the decoder is tied to the input table; without it the head owns a
    bias-free `decoder` matrix. A `bias` of one value per token is added
    either way. A subclass builds its transforms (with `_dense` and
    `_layer_norm`), then calls `build_decoder(width)`, and ends its `call`
    with `decode(x)`; `MaskedLMHead` and `SpanBoundaryHead` do.

    `token_embedding` is a reference to another model's layer and is not part
    of `get_config`: a model that owns both passes it again when rebuilt.

    Args:
        vocabulary_size: size of the output vocabulary.
        token_embedding: optional `ReversibleEmbedding` to tie the decoder to.
        embedding_dim: width of the last transform when untied; defaults to
            the input width.
        activation: transform activation (BERT: exact GELU).
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer: initializer of the transforms (and untied decoder).

    Example:
    >>> head = VocabularyHead(vocabulary_size=10)
    >>> head.build_decoder(4)
    >>> tuple(head.decode(keras.ops.ones((2, 4))).shape)
    (2, 10)
    """

    def __init__(
        self,
        vocabulary_size,
        token_embedding=None,
        embedding_dim=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = positive_int("vocabulary_size", vocabulary_size)
        self.token_embedding = token_embedding
        embedding_dim = positive_int("embedding_dim", embedding_dim, optional=True)
        self.embedding_dim = tied_embedding_dim(token_embedding, self.vocabulary_size, embedding_dim)
        get_activation(activation)  # rejects an unknown name now, not at build
        self.activation = activation
        self.layer_norm_epsilon = positive_number("layer_norm_epsilon", layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _dense(self, units, name):
        """A transform: `Dense` with the head's activation and initializer."""
        return FusedDense(
            units,
            activation=get_activation(self.activation),
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def _layer_norm(self, name):
        """A `LayerNormalization` with the head's epsilon."""
        return LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def build_decoder(self, width):
        """Creates the untied `decoder` (when there is no `token_embedding`) and the `bias`."""
        self.decoder = None
        if self.token_embedding is None:
            self.decoder = FusedDense(
                self.vocabulary_size,
                use_bias=False,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name="decoder",
            )
            self.decoder.build((None, None, width))
        self.bias = self.add_weight(
            name="bias", shape=(self.vocabulary_size,), initializer="zeros"
        )

    def decode(self, x):
        """Vocabulary logits of `x` `(..., width)`: the decoder plus the bias."""
        if self.token_embedding is not None:
            logits = self.token_embedding(x, reverse=True)
        else:
            logits = self.decoder(x)
        return logits + ops.cast(self.bias, logits.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "activation": serialize_activation(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
