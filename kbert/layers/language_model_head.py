import keras

from kbert.layers.vocabulary_head import VocabularyHead


@keras.saving.register_keras_serializable(package="kbert")
class LanguageModelHead(VocabularyHead):
    """A head with no transform: hidden states to vocabulary logits, plus a bias.

    `logits = h · Wtokᵀ + b` with `token_embedding` (BART's tied head and its
    `final_logits_bias`, docs/algorithms.md §10), `h · W + b` with an untied
    `decoder` of its own (see `VocabularyHead`).

    Args:
        vocabulary_size: size of the output vocabulary.
        token_embedding: optional `ReversibleEmbedding` to tie the decoder to.
        kernel_initializer: initializer of an untied decoder.

    Call arguments:
        inputs: hidden states `(..., width)`.

    Example:
    >>> head = LanguageModelHead(vocabulary_size=50)
    >>> tuple(head(keras.ops.ones((2, 7, 16))).shape)
    (2, 7, 50)
    """

    def __init__(self, vocabulary_size, token_embedding=None, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(
            vocabulary_size,
            token_embedding=token_embedding,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )

    def build(self, inputs_shape):
        self.build_decoder(self.embedding_dim or inputs_shape[-1])
        self.built = True

    def call(self, inputs):
        return self.decode(inputs)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.vocabulary_size,)

    def get_config(self):
        config = super().get_config()
        for transform_argument in ("embedding_dim", "activation", "layer_norm_epsilon"):
            config.pop(transform_argument)
        return config
