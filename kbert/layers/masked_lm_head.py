import keras
from keras import ops

from kbert.input_checks import check_ids_in_range
from kbert.layers.sequence_shape import check_sequence_shape
from kbert.layers.vocabulary_head import VocabularyHead


@keras.saving.register_keras_serializable(package="kbert")
class MaskedLMHead(VocabularyHead):
    """BERT's masked-LM head: gather masked positions, transform, decode to the vocabulary.

    `logits = LN(act(Dense(h[positions]))) · Wtokᵀ + b`. With `token_embedding`
    (a `ReversibleEmbedding`, usually the backbone's) the decoder is tied to the
    input table, as in BERT; without it the head owns a decoder matrix (see
    `VocabularyHead`). The transform width is the table's width, so ALBERT and
    ELECTRA generators (embedding 128 < hidden) project down before decoding.

    Args:
        vocabulary_size: size of the output vocabulary.
        token_embedding: optional `ReversibleEmbedding` to tie the decoder to.
        embedding_dim: transform width when untied; defaults to the input width.
        activation: transform activation (BERT: exact GELU).
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer: initializer of the transform (and untied decoder).

    Call arguments:
        inputs: hidden states `(batch, sequence, hidden)`.
        mask_positions: int `(batch, predictions)`: indices into `sequence`.

    Example:
    >>> head = MaskedLMHead(vocabulary_size=50)
    >>> logits = head(keras.ops.ones((2, 7, 16)), keras.ops.zeros((2, 3), "int32"))
    >>> tuple(logits.shape)
    (2, 3, 50)
    """

    def build(self, inputs_shape, mask_positions_shape=None):
        check_sequence_shape(self, inputs_shape)
        width = self.embedding_dim or inputs_shape[-1]
        gathered_shape = (inputs_shape[0], None, inputs_shape[-1])
        self.transform = self._dense(width, "transform")
        self.transform.build(gathered_shape)
        self.layer_norm = self._layer_norm("layer_norm")
        self.layer_norm.build(gathered_shape[:-1] + (width,))
        self.build_decoder(width)
        self.built = True

    def call(self, inputs, mask_positions):
        if len(mask_positions.shape) != 2:
            raise ValueError(
                "mask_positions must have shape (batch, predictions); "
                f"received shape {tuple(mask_positions.shape)}."
            )
        if inputs.shape[1] is not None:
            check_ids_in_range(mask_positions, inputs.shape[1], "Mask position")
        positions = ops.cast(mask_positions, "int32")[:, :, None]
        x = ops.take_along_axis(inputs, positions, axis=1)
        return self.decode(self.layer_norm(self.transform(x)))

    def compute_output_shape(self, inputs_shape, mask_positions_shape):
        return tuple(mask_positions_shape) + (self.vocabulary_size,)
